------------------------ MODULE MutArenaReuseAnyReleased ------------------------
(* Mutant: the writer treats a slot as free when ANY reader (not every one)  *)
(* has released it.  Expected: it copies over a slot another reader views.   *)
EXTENDS TensorArena

MutFree(s) == (\E r \in Readers : owes[s][r] = 0) \/ slotSeq[s] >= next

MutArenaClaim(s) ==
    /\ wpc = "begin"
    /\ MutFree(s)
    /\ owes' = [owes EXCEPT ![s] = [r \in Readers |-> 1]]
    /\ slotSeq' = [slotSeq EXCEPT ![s] = next]
    /\ content' = [content EXCEPT ![s] = 0]
    /\ wslot' = s /\ wpc' = "copy"
    /\ UNCHANGED <<next, aborts, sent, rvars>>

MutArenaFallback ==
    /\ wpc = "begin"
    /\ \A s \in Slots : ~MutFree(s)
    /\ wslot' = NoSlot /\ wpc' = "publish"
    /\ UNCHANGED <<owes, slotSeq, content, next, aborts, sent, rvars>>

MutWriter == (\E s \in Slots : MutArenaClaim(s)) \/ MutArenaFallback \/ ArenaCopy \/ QueueAbort
             \/ QueuePublish
MutReader(r) == QueueTake(r) \/ ArenaRebuild(r) \/ QueueDecodeFail(r) \/ QueueClose(r)
                \/ QueueClosed(r) \/ (\E v \in views[r] : ArenaRelease(r, v))
                \/ (\E s \in Slots : ArenaDropRelease(r, s))
MutNext == MutWriter \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars
=============================================================================
