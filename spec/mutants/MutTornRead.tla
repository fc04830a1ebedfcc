----------------------------- MODULE MutTornRead -----------------------------
(* Mutant (f): the writer clears the read flags BEFORE storing the payload *)
(* and never clears `written` first (order: WriterPoll, WriterClearReadFlag *)
(* x N, WriterFillPayload, WriterPublish).  Expected: on the second lap    *)
(* written is still 1 from the last lap, the reader's flag is already 0,  *)
(* so it reads while the payload is being stored: a torn read.            *)
EXTENDS MC

MutWriterPoll ==              \* as WriterPoll, then straight to the flag clears
    /\ wpc = "poll"
    /\ IF ChunkFree(windex)
         THEN wpc' = "flags" /\ toClear' = Slots
         ELSE UNCHANGED <<wpc, toClear>>
    /\ UNCHANGED <<shared, windex, sent, aborts, rvars>>

MutWriterClearReadFlag ==     \* the last clear goes on to the payload
    /\ wpc = "flags"
    /\ \E i \in toClear :
         /\ readFlag' = [readFlag EXCEPT ![windex][i] = 0]
         /\ toClear' = toClear \ {i}
    /\ wpc' = IF toClear' = {} THEN "fill" ELSE "flags"
    /\ UNCHANGED <<written, payload, windex, sent, aborts, rvars>>

MutWriterFillPayload ==
    /\ wpc = "fill"
    /\ payload' = [payload EXCEPT ![windex] = sent + 1]
    /\ wpc' = "publish"
    /\ UNCHANGED <<written, readFlag, windex, toClear, sent, aborts, rvars>>

MutWriter == \/ MutWriterPoll \/ MutWriterClearReadFlag \/ MutWriterFillPayload \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
