------------------------- MODULE MutSleepNoRecheck -------------------------
(* Lost wake-up (a): the reader announces its sleep and blocks without     *)
(* re-checking the ring.  A message published between the reader's last   *)
(* failed poll and its announcement is never seen by the writer's check    *)
(* (the word was still 0) nor by the reader: it blocks on word 1 with the  *)
(* message waiting.  Expected: NoLostWakeupInv.                            *)
EXTENDS ReaderSleep

MutReaderAnnounceSleep(r) ==   \* BUG: straight to the futex wait
    /\ rpc[r] = "announce"
    /\ asleep' = [asleep EXCEPT ![r] = 1]
    /\ rpc' = [rpc EXCEPT ![r] = "block"]
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, got>>

MutReader(r) == \/ ReaderPollWritten(r) \/ MutReaderAnnounceSleep(r) \/ ReaderFlush(r)
                \/ ReaderBlock(r) \/ ReaderEndSleep(r) \/ ReaderRelease(r)
MutNext == Writer \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(Writer)
           /\ \A r \in Readers : WF_vars(MutReader(r))
=============================================================================
