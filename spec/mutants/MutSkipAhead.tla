---------------------------- MODULE MutSkipAhead ----------------------------
(* Mutant (d): the writer does not insist on its own index: WriterPoll     *)
(* takes ANY free chunk (e.g. the next free one ahead) and writes there.   *)
(* Readers still follow their own index.  Expected: a reader receives a    *)
(* later message first (out of order / skip).                              *)
EXTENDS MC

MutWriterPoll ==
    /\ wpc = "poll"
    /\ IF \E j \in Chunks : ChunkFree(j)
         THEN \E j \in Chunks : ChunkFree(j) /\ windex' = j /\ wpc' = "clear"
         ELSE UNCHANGED <<windex, wpc>>            \* spin
    /\ UNCHANGED <<shared, toClear, sent, aborts, rvars>>

MutWriter == \/ MutWriterPoll \/ WriterClearWritten \/ WriterFillPayload
             \/ WriterAbort \/ WriterClearReadFlag \/ WriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
