------------------------- MODULE MutInterruptNoWake ------------------------
(* The ring's publish before this round: an exception in wake_sleepers (a  *)
(* signal at the return of the copy of the words, or of a futex wake)      *)
(* left publish with the readers it had not woken yet still blocked, the   *)
(* message published.  Expected: NoLostWakeupWInv.                         *)
EXTENDS ReaderWake

MutWriterInterruptedInWake ==   \* BUG: no wake_all on the way out
    /\ irq < MaxInterrupts /\ wa = NoWakeAll /\ ~wbuf
    /\ wpc \in {"check", "clear"}
    /\ irq' = irq + 1
    /\ seen' = {}
    /\ wpc' = AfterNotify
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, rpc, got, stop, cpc, framed, wa, ended, frameVars>>

MutWriter == WriterStep \/ MutWriterInterruptedInWake \/ WriterShutdown \/ WriterMarkEnded
             \/ WriterWakeAllClear \/ WriterWakeAllWake
MutNext == MutWriter \/ (\E r \in Readers : WakeReader(r) \/ Cutter(r) \/ FrameArrive(r))
           \/ (WakeDone /\ UNCHANGED allVars)
MutFairness ==
    /\ WF_allVars(MutWriter)
    /\ \A r \in Readers : WF_allVars(WakeReader(r))
    /\ \A r \in Readers : WF_allVars(CutterClearSleep(r) \/ CutterWake(r))
    /\ \A r \in Readers : WF_allVars(FrameArrive(r))
MutSpec == WakeInit /\ [][MutNext]_allVars /\ MutFairness
=============================================================================
