----------------------- MODULE MutWakeAllBeforeFrame -----------------------
(* The writer wakes every reader before it sends SHUTDOWN.  A woken reader *)
(* polls, finds neither a message nor the frame, and blocks again; the     *)
(* frame then arrives and no wake follows it.  Expected: NoLostCutInv.     *)
EXTENDS ReaderWake

MutWriterShutdown ==   \* BUG: the wake_all first ...
    /\ Frame /\ wpc = "done" /\ ~wbuf /\ ~framed /\ wa = NoWakeAll /\ irq = 0
    /\ wa' = StartWakeAll
    /\ irq' = 1   \* (marks the wake_all as the shutdown's; no interrupt in this model)
    /\ UNCHANGED <<vars, stop, cpc, framed, ended>>

MutWriterSendFrame ==  \* ... and the frame after it
    /\ wpc = "done" /\ ~framed /\ wa = NoWakeAll /\ irq = 1
    /\ framed' = TRUE
    /\ UNCHANGED <<vars, stop, cpc, wa, irq, ended>>

MutWriter == WriterStep \/ MutWriterShutdown \/ MutWriterSendFrame
             \/ WriterWakeAllClear \/ WriterWakeAllWake
MutNext == MutWriter \/ (\E r \in Readers : WakeReader(r) \/ Cutter(r))
           \/ (WakeDone /\ UNCHANGED allVars)
MutFairness ==
    /\ WF_allVars(MutWriter)
    /\ \A r \in Readers : WF_allVars(WakeReader(r))
    /\ \A r \in Readers : WF_allVars(CutterClearSleep(r) \/ CutterWake(r))
MutSpec == WakeInit /\ [][MutNext]_allVars /\ MutFairness
=============================================================================
