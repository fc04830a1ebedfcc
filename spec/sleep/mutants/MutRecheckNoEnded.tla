------------------------- MODULE MutRecheckNoEnded -------------------------
(* The local reader before this round: its re-check looked at the socket   *)
(* but knew nothing of the ended word.  The writer sends SHUTDOWN, stores  *)
(* the ended word and wakes every reader; the woken reader re-checks while *)
(* the frame is still in ZeroMQ's IO threads, finds nothing, and blocks    *)
(* again on its sleep word: only its block's bound ends the wait (30 s in  *)
(* tests/test_queue.py).  Expected: NoLostCutInv.                          *)
EXTENDS ReaderWake

MutReaderSeeEnded(r) ==   \* BUG: the load's result is not acted on
    /\ rpc[r] = "block" /\ lookEnded[r] /\ ~rbuf[r]
    /\ lookEnded' = [lookEnded EXCEPT ![r] = FALSE]
    /\ UNCHANGED <<vars, stop, cpc, framed, wa, irq, ended, arrived, endedWord>>

MutReader(r) == \/ ReaderPoll(r) \/ MutReaderSeeEnded(r) \/ ReaderSeeStop(r)
                \/ ReaderLeave(r) \/ ReaderSame(r) \/ ReaderReleaseW(r)
MutNext == WakeWriter \/ (\E r \in Readers : MutReader(r) \/ Cutter(r) \/ FrameArrive(r))
           \/ (WakeDone /\ UNCHANGED allVars)
MutFairness ==
    /\ WF_allVars(WakeWriter)
    /\ \A r \in Readers : WF_allVars(MutReader(r))
    /\ \A r \in Readers : WF_allVars(CutterClearSleep(r) \/ CutterWake(r))
    /\ \A r \in Readers : WF_allVars(FrameArrive(r))
MutSpec == WakeInit /\ [][MutNext]_allVars /\ MutFairness
=============================================================================
