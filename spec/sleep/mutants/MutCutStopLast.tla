-------------------------- MODULE MutCutStopLast ---------------------------
(* The cutter clears and wakes first and sets what the reader is to see    *)
(* last (the writer watch calling cut_sleep before on_lost, or shutdown()  *)
(* cutting before it sets shutting_down).  The woken reader re-checks      *)
(* before stop is set and blocks again; stop is then set and no wake       *)
(* comes.  Expected: NoLostCutInv.                                         *)
EXTENDS ReaderWake

MutCutterClear(r) ==   \* BUG: the clear first ...
    /\ Cuts /\ cpc[r] = "idle"
    /\ asleep' = [asleep EXCEPT ![r] = 0]
    /\ cpc' = [cpc EXCEPT ![r] = "wake"]
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, rpc, got, stop, framed, wa, irq,
                   ended, frameVars>>

MutCutterWake(r) ==
    /\ cpc[r] = "wake"
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ cpc' = [cpc EXCEPT ![r] = "set"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, stop, framed, wa, irq,
                   ended, frameVars>>

MutCutterSet(r) ==     \* ... and what the reader is to see last
    /\ cpc[r] = "set"
    /\ stop' = [stop EXCEPT ![r] = TRUE]
    /\ cpc' = [cpc EXCEPT ![r] = "done"]
    /\ UNCHANGED <<vars, framed, wa, irq, ended, frameVars>>

MutCutter(r) == MutCutterClear(r) \/ MutCutterWake(r) \/ MutCutterSet(r)
MutNext == WakeWriter \/ (\E r \in Readers : WakeReader(r) \/ MutCutter(r) \/ FrameArrive(r))
           \/ (WakeDone /\ UNCHANGED allVars)
MutFairness ==
    /\ WF_allVars(WakeWriter)
    /\ \A r \in Readers : WF_allVars(WakeReader(r))
    /\ \A r \in Readers : WF_allVars(MutCutterWake(r) \/ MutCutterSet(r))
    /\ \A r \in Readers : WF_allVars(FrameArrive(r))
MutSpec == WakeInit /\ [][MutNext]_allVars /\ MutFairness
=============================================================================
