------------------------ MODULE MutArenaReleaseOnRebuild ------------------------
(* Mutant: the reader clears its owes byte when it rebuilds the tensor, not *)
(* when the tensor's storage is freed.  Expected: the writer claims a slot a  *)
(* reader still views and copies over it.                                    *)
EXTENDS TensorArena

MutArenaRebuildStep(r) ==
    /\ rpc[r] = "rebuild"
    /\ views' = [views EXCEPT ![r] = @ \cup {[slot |-> rmsg[r].slot, m |-> rmsg[r].m]}]
    /\ seen' = [seen EXCEPT ![r] = Append(@, <<rmsg[r].m, content[rmsg[r].slot]>>)]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ rmsg' = [rmsg EXCEPT ![r] = NoMsg]
    /\ owes' = [owes EXCEPT ![rmsg[r].slot][r] = 0]
    /\ UNCHANGED <<slotSeq, content, wvars, rnext, fails, fin, dpend>>

MutArenaRelease(r, v) ==  \* the view dies: nothing left to release
    /\ v \in views[r]
    /\ views' = [views EXCEPT ![r] = @ \ {v}]
    /\ UNCHANGED <<owes, slotSeq, content, wvars, rpc, rnext, rmsg, seen, fails, fin, dpend>>

MutWriter == (\E s \in Slots : ArenaClaim(s)) \/ ArenaFallback \/ ArenaCopy \/ QueueAbort
             \/ QueuePublish
MutReader(r) == QueueTake(r) \/ MutArenaRebuildStep(r) \/ QueueDecodeFail(r) \/ QueueClose(r)
                \/ QueueClosed(r) \/ (\E v \in views[r] : MutArenaRelease(r, v))
                \/ (\E s \in Slots : ArenaDropRelease(r, s))
MutNext == MutWriter \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars
=============================================================================
