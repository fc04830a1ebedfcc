-------------------------- MODULE MutRecheckNoLook -------------------------
(* The re-check looks at the socket only on its timed look (every SLICE),  *)
(* as the normal poll does, even once the ended word is 1.  The reader is  *)
(* kept off its sleep word (it clears it) but may never look when the      *)
(* frame is there: it polls for ever.  Expected: FrameSeenProp.            *)
EXTENDS ReaderWake

MutReaderPoll(r) ==   \* BUG: the frame is never a must, not even in the re-check
    /\ ~ended[r]
    /\ ReaderPollWritten(r)
    /\ ~(got[r] >= pub /\ stop[r])
    /\ lookEnded' = [lookEnded EXCEPT ![r] = rpc[r] = "recheck" /\ got[r] >= pub]
    /\ UNCHANGED <<stop, cpc, framed, wa, irq, ended, arrived, endedWord>>

MutReader(r) == \/ MutReaderPoll(r) \/ ReaderSeeEnded(r) \/ ReaderSeeStop(r)
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
