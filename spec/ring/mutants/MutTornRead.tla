----------------------------- MODULE MutTornRead -----------------------------
(* Mutant (f): the writer clears the read flags BEFORE storing the payload *)
(* and never clears `written` first (order: poll, WriterClearReadFlag x N, *)
(* WriterFillPayload, WriterPublish).  Expected: on the second lap written *)
(* is still 1 from the last lap, the reader's flag is already 0, so it     *)
(* reads while the payload is being stored: a torn read.                   *)
EXTENDS MC

MutWriterClearWritten ==      \* no store: straight on to the flag clears
    /\ wpc = "clear"
    /\ wpc' = "flags"
    /\ UNCHANGED <<shared, windex, wflag, sent, aborts, rvars>>

MutWriterClearReadFlag ==     \* in order; the last clear goes on to the payload
    /\ wpc = "flags"
    /\ readFlag' = [readFlag EXCEPT ![windex][wflag] = 0]
    /\ IF wflag = LastFlag
         THEN wpc' = "fill" /\ wflag' = 0
         ELSE wpc' = "flags" /\ wflag' = wflag + 1
    /\ UNCHANGED <<written, payload, windex, sent, aborts, rvars>>

MutWriterFillPayload ==
    /\ wpc = "fill"
    /\ payload' = [payload EXCEPT ![windex] = sent + 1]
    /\ wpc' = "publish"
    /\ UNCHANGED <<written, readFlag, windex, wflag, sent, aborts, rvars>>

MutWriter == \/ WriterPollWritten \/ WriterPollReadFlag \/ MutWriterClearWritten
             \/ MutWriterClearReadFlag \/ MutWriterFillPayload \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
