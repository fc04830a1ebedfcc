------------------------ MODULE MutArenaNoDropRelease ------------------------
(* Mutant: no sweep -- only a view's death releases.  A message that failed *)
(* to decode, or a claim whose enqueue failed, leaves its slot owed for     *)
(* ever.  Expected: not every slot is eventually released (liveness).       *)
EXTENDS TensorArena

MutWriter == (\E s \in Slots : ArenaClaim(s)) \/ ArenaFallback \/ ArenaCopy \/ QueueAbort
             \/ QueuePublish
MutReader(r) == QueueTake(r) \/ ArenaRebuild(r) \/ QueueDecodeFail(r) \/ QueueClose(r)
                \/ QueueClosed(r) \/ (\E v \in views[r] : ArenaRelease(r, v))
MutNext == MutWriter \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars
MutFairSpec == /\ MutSpec /\ WF_vars(MutWriter)
               /\ \A r \in Readers : WF_vars(MutReader(r))
               /\ \A r \in Readers : WF_vars(\E v \in views[r] : ArenaRelease(r, v))
=============================================================================
