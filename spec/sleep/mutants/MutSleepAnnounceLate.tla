------------------------ MODULE MutSleepAnnounceLate ------------------------
(* Lost wake-up (b): the reader re-checks the ring first and stores its    *)
(* sleep word after the re-check, then blocks.  The writer may publish and *)
(* check the words between the two: it sees 0, the reader saw no message,  *)
(* and the reader blocks on word 1.  Expected: NoLostWakeupInv.            *)
EXTENDS ReaderSleep

\* A failed normal poll goes to the re-check without announcing.
MutReaderPollWritten(r) ==
    LET ready == got[r] < pub IN
    /\ rpc[r] \in {"poll", "recheck"}
    /\ IF rpc[r] = "poll"
         THEN rpc' = [rpc EXCEPT ![r] = IF ready THEN "read" ELSE "recheck"]
         ELSE rpc' = [rpc EXCEPT ![r] = IF ready THEN "endready" ELSE "announce"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got>>

MutReaderAnnounceSleep(r) ==   \* BUG: after the re-check, straight to the wait
    /\ rpc[r] = "announce"
    /\ asleep' = [asleep EXCEPT ![r] = 1]
    /\ rpc' = [rpc EXCEPT ![r] = "block"]
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, got>>

MutReader(r) == \/ MutReaderPollWritten(r) \/ MutReaderAnnounceSleep(r)
                \/ ReaderFlush(r) \/ ReaderBlock(r) \/ ReaderEndSleep(r)
                \/ ReaderRelease(r)
MutNext == Writer \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(Writer)
           /\ \A r \in Readers : WF_vars(MutReader(r))
=============================================================================
