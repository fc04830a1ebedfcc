------------------------ MODULE MutArenaDropDuringDecode ------------------------
(* Mutant: the sweep of consumed unviewed slots may run while a message is  *)
(* being decoded (between taking it and rebuilding its view), as a sweep    *)
(* from a finalizer or another thread could.  Expected: the slot of the     *)
(* message being decoded is released, reused, and the reader rebuilds a     *)
(* view of another message's bytes.                                          *)
EXTENDS TensorArena

MutArenaDropRelease(r, s) ==
    /\ owes[s][r] = 1
    /\ s \notin ViewedSlots(r)
    /\ (DropAllowed(r, s) \/ (rpc[r] = "rebuild" /\ slotSeq[s] < rnext[r]))
    /\ owes' = [owes EXCEPT ![s][r] = 0]
    /\ UNCHANGED <<slotSeq, content, wvars, rvars>>

MutWriter == (\E s \in Slots : ArenaClaim(s)) \/ ArenaFallback \/ ArenaCopy \/ QueueAbort
             \/ QueuePublish
MutReader(r) == QueueTake(r) \/ ArenaRebuild(r) \/ QueueDecodeFail(r) \/ QueueClose(r)
                \/ QueueClosed(r) \/ (\E v \in views[r] : ArenaRelease(r, v))
                \/ (\E s \in Slots : MutArenaDropRelease(r, s))
MutNext == MutWriter \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars
=============================================================================
