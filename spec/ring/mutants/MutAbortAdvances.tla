--------------------------- MODULE MutAbortAdvances ---------------------------
(* Mutant: on WriterAbort the writer advances its index anyway (the index  *)
(* bump sits outside the exception path).  The abandoned chunk keeps its   *)
(* partial payload and written = 0; the next message goes to the chunk     *)
(* after it.  Expected: a reader whose index points at the abandoned chunk *)
(* waits there while the writer laps around, or receives messages out of  *)
(* order -- TLC reports which comes first.                                 *)
EXTENDS MC

MutWriterAbort ==
    /\ wpc = "fill"
    /\ aborts < MaxAborts
    /\ payload' = [payload EXCEPT ![windex] = Torn]
    /\ aborts' = aborts + 1
    /\ windex' = Succ(windex)
    /\ wpc' = "poll"
    /\ UNCHANGED <<written, readFlag, wflag, sent, rvars>>

MutWriter == \/ WriterPollWritten \/ WriterPollReadFlag \/ WriterClearWritten
             \/ WriterFillPayload \/ MutWriterAbort \/ WriterClearReadFlag
             \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
