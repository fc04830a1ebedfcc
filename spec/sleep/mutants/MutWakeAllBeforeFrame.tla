----------------------- MODULE MutWakeAllBeforeFrame -----------------------
(* The writer wakes every reader before it sends SHUTDOWN and stores the   *)
(* ended word.  A woken reader polls, finds neither a message, nor the     *)
(* frame, nor the ended word, and blocks again; the frame and the ended    *)
(* word then come and no wake follows them.  Expected: NoLostCutInv.       *)
EXTENDS ReaderWake

MutWriterShutdown ==   \* BUG: the wake_all first ...
    /\ Frame /\ wpc = "done" /\ ~wbuf /\ ~framed /\ wa = NoWakeAll /\ irq = 0
    /\ wa' = StartWakeAll
    /\ irq' = 1   \* (marks the wake_all as the shutdown's; no interrupt in this model)
    /\ UNCHANGED <<vars, stop, cpc, framed, ended, frameVars>>

MutWriterSendFrame ==  \* ... and the frame and the ended word after it
    /\ wpc = "done" /\ ~framed /\ wa = NoWakeAll /\ irq = 1
    /\ framed' = TRUE
    /\ endedWord' = TRUE
    /\ UNCHANGED <<vars, stop, cpc, wa, irq, ended, arrived, lookEnded>>

MutWriter == WriterStep \/ MutWriterShutdown \/ MutWriterSendFrame
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
