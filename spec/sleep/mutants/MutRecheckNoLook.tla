-------------------------- MODULE MutRecheckNoLook -------------------------
(* The local reader before this round: the re-check before a block looked  *)
(* at the socket only on its timed look (every SLICE), as the normal poll  *)
(* does.  The writer sends SHUTDOWN and wakes every reader; a woken reader *)
(* whose last look was recent polls and re-checks without looking, and    *)
(* blocks again with the frame waiting.  Expected: NoLostCutInv.          *)
EXTENDS ReaderWake

MutReaderPoll(r) ==   \* BUG: the frame is never a must, not even in the re-check
    /\ ~ended[r]
    /\ ReaderPollWritten(r)
    /\ ~(got[r] >= pub /\ stop[r])
    /\ UNCHANGED wakeVars

MutReader(r) == \/ MutReaderPoll(r) \/ ReaderSeeStop(r) \/ ReaderLeave(r)
                \/ ReaderSame(r) \/ ReaderReleaseW(r)
MutNext == WakeWriter \/ (\E r \in Readers : MutReader(r) \/ Cutter(r))
           \/ (WakeDone /\ UNCHANGED allVars)
MutFairness ==
    /\ WF_allVars(WakeWriter)
    /\ \A r \in Readers : WF_allVars(MutReader(r))
    /\ \A r \in Readers : WF_allVars(CutterClearSleep(r) \/ CutterWake(r))
MutSpec == WakeInit /\ [][MutNext]_allVars /\ MutFairness
=============================================================================
