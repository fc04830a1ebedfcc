------------------------- MODULE MutWakeAllNoClear -------------------------
(* The writer's wake_all wakes every reader without clearing its word      *)
(* first.  A reader whose re-check failed just before the SHUTDOWN frame   *)
(* was sent is not in the futex yet when the wake comes; its wait then     *)
(* blocks on the word still 1, and nothing else will wake it.              *)
(* Expected: NoLostCutInv.                                                 *)
EXTENDS ReaderWake

MutWriterWakeAllClear ==   \* BUG: no store
    /\ wa # NoWakeAll /\ wa[2] = "clear"
    /\ wa' = <<wa[1], "wake">>
    /\ UNCHANGED <<vars, stop, cpc, framed, irq, ended, frameVars>>

MutWriter == WriterStep \/ WriterInterruptedInWake \/ WriterShutdown \/ WriterMarkEnded
             \/ MutWriterWakeAllClear \/ WriterWakeAllWake
MutNext == MutWriter \/ (\E r \in Readers : WakeReader(r) \/ Cutter(r) \/ FrameArrive(r))
           \/ (WakeDone /\ UNCHANGED allVars)
MutFairness ==
    /\ WF_allVars(MutWriter)
    /\ \A r \in Readers : WF_allVars(WakeReader(r))
    /\ \A r \in Readers : WF_allVars(CutterClearSleep(r) \/ CutterWake(r))
    /\ \A r \in Readers : WF_allVars(FrameArrive(r))
MutSpec == WakeInit /\ [][MutNext]_allVars /\ MutFairness
=============================================================================
