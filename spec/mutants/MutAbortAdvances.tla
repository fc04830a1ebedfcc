--------------------------- MODULE MutAbortAdvances ---------------------------
(* Extra mutant: on WriterAbort the writer advances its index anyway (the  *)
(* index bump sits outside the exception path).  The abandoned chunk stays *)
(* written = 0 forever on this lap, and every reader's index points at it. *)
(* Expected: readers spin forever -- a liveness violation, not a deadlock. *)
EXTENDS MC

MutWriterAbort ==
    /\ wpc = "fill"
    /\ aborts < MaxAborts
    /\ payload' = [payload EXCEPT ![windex] = Torn]
    /\ aborts' = aborts + 1
    /\ windex' = Succ(windex)
    /\ wpc' = "poll"
    /\ UNCHANGED <<written, readFlag, toClear, sent, rvars>>

MutWriter == \/ WriterPoll \/ WriterClearWritten \/ WriterFillPayload
             \/ MutWriterAbort \/ WriterClearReadFlag \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
