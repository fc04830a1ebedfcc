------------------------ MODULE MutArenaBlocks ------------------------
(* Mutant: no fallback -- with no free slot the writer waits for a reader   *)
(* to release one.  Expected: the writer blocks (a reader may hold its views *)
(* as long as it likes).                                                     *)
EXTENDS TensorArena

MutWriter == (\E s \in Slots : ArenaClaim(s)) \/ ArenaCopy \/ QueueAbort
             \/ QueuePublish
MutReader(r) == QueueTake(r) \/ ArenaRebuild(r) \/ QueueDecodeFail(r) \/ QueueClose(r)
                \/ QueueClosed(r) \/ (\E v \in views[r] : ArenaRelease(r, v))
                \/ (\E s \in Slots : ArenaDropRelease(r, s))
MutNext == MutWriter \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars
MutNeverBlocksInv == wpc = "begin" => ENABLED MutWriter
=============================================================================
