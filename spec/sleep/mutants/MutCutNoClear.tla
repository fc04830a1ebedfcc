--------------------------- MODULE MutCutNoClear ---------------------------
(* The cut as it was before: cut_sleep only woke, it did not clear the     *)
(* word.  The reader's re-check ran before stop was set, so it goes on to  *)
(* block; the cutter sets stop and wakes -- nobody is in the futex yet --  *)
(* and the wait then blocks on the word still 1, with stop set and no wake *)
(* to come.  Expected: NoLostCutInv.                                       *)
EXTENDS ReaderWake

MutCutterSetStop(r) ==   \* BUG: straight to the wake
    /\ Cuts /\ cpc[r] = "idle"
    /\ stop' = [stop EXCEPT ![r] = TRUE]
    /\ cpc' = [cpc EXCEPT ![r] = "wake"]
    /\ UNCHANGED <<vars, framed, wa, irq, ended, frameVars>>

MutCutter(r) == MutCutterSetStop(r) \/ CutterWake(r)
MutNext == WakeWriter \/ (\E r \in Readers : WakeReader(r) \/ MutCutter(r) \/ FrameArrive(r))
           \/ (WakeDone /\ UNCHANGED allVars)
MutSpec == WakeInit /\ [][MutNext]_allVars /\ WakeFairness
=============================================================================
