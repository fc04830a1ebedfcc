--------------------------- MODULE MutAbortPublishes ---------------------------
(* Mutant: WriterCursor.__exit__ runs the flag clears and the publish even *)
(* when the caller raised (a `finally:` instead of the exception check).   *)
(* The partial payload is published.  Expected: a torn read.               *)
EXTENDS MC

MutWriterAbort ==             \* partial payload, then carry on with the clears
    /\ wpc = "fill"
    /\ aborts < MaxAborts
    /\ payload' = [payload EXCEPT ![windex] = Torn]
    /\ aborts' = aborts + 1
    /\ wpc' = "flags"
    /\ UNCHANGED <<written, readFlag, windex, wflag, sent, rvars>>

MutWriter == \/ WriterPollWritten \/ WriterPollReadFlag \/ WriterClearWritten
             \/ WriterFillPayload \/ MutWriterAbort \/ WriterClearReadFlag
             \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
