------------------------ MODULE MutSkipAheadWhenBusy ------------------------
(* Variant of (d) that only skips when its own chunk is busy.  Not a       *)
(* mutant TLC can kill: readers consume in order, so the busy chunks always *)
(* form one arc starting at windex and no later chunk is ever free while   *)
(* windex is busy -- the skip branch is dead code.  Kept as a "holds"      *)
(* model that documents why the protocol needs no skip-ahead logic.        *)
EXTENDS MC

MutWriterPoll ==
    /\ wpc = "poll"
    /\ IF ChunkFree(windex)
         THEN wpc' = "clear" /\ UNCHANGED windex
       ELSE IF \E j \in Chunks : ChunkFree(j)
         THEN \E j \in Chunks : ChunkFree(j) /\ windex' = j /\ wpc' = "clear"
         ELSE UNCHANGED <<windex, wpc>>            \* spin
    /\ UNCHANGED <<shared, toClear, sent, aborts, rvars>>

MutWriter == \/ MutWriterPoll \/ WriterClearWritten \/ WriterFillPayload
             \/ WriterAbort \/ WriterClearReadFlag \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
