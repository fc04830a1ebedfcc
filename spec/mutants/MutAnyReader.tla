---------------------------- MODULE MutAnyReader ----------------------------
(* Mutant (e): WriterPoll treats the chunk as free when ANY reader (not    *)
(* all) has acknowledged it.  Expected: the writer overwrites a chunk a    *)
(* slower reader has not read.                                             *)
EXTENDS MC

MutFree(c) == written[c] = 0 \/ \E i \in Slots : readFlag[c][i] = 1

MutWriterPoll ==
    /\ wpc = "poll"
    /\ IF MutFree(windex) THEN wpc' = "clear" ELSE UNCHANGED wpc
    /\ UNCHANGED <<shared, windex, toClear, sent, aborts, rvars>>

MutWriter == \/ MutWriterPoll \/ WriterClearWritten \/ WriterFillPayload
             \/ WriterAbort \/ WriterClearReadFlag \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
