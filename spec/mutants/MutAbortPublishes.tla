--------------------------- MODULE MutAbortPublishes ---------------------------
(* Extra mutant: WriterCursor.__exit__ runs the flag clears and the publish *)
(* even when the caller raised (a `finally:` instead of `else:`).  The     *)
(* partial payload is published.  Expected: a torn read.                   *)
EXTENDS MC

MutWriterAbort ==             \* partial payload, then carry on with the clears
    /\ wpc = "fill"
    /\ aborts < MaxAborts
    /\ payload' = [payload EXCEPT ![windex] = Torn]
    /\ aborts' = aborts + 1
    /\ toClear' = Slots
    /\ wpc' = "flags"
    /\ UNCHANGED <<written, readFlag, windex, sent, rvars>>

MutWriter == \/ WriterPoll \/ WriterClearWritten \/ WriterFillPayload
             \/ MutWriterAbort \/ WriterClearReadFlag \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
