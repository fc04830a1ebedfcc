--------------------------- MODULE MutWakeNoClear ---------------------------
(* Lost wake-up (d): the writer wakes a reader it saw asleep without       *)
(* clearing its word first.  A wake that comes after the reader's failed   *)
(* re-check but before its futex wait finds nobody waiting, and the wait   *)
(* then blocks: the word is still 1.  Expected: NoLostWakeupInv.           *)
EXTENDS ReaderSleep

MutWriterCheckSleep ==
    /\ wpc = "check"
    /\ seen' = {r \in Readers : asleep[r] = 1}
    /\ wpc' = IF seen' = {} THEN AfterNotify ELSE "wake"   \* BUG: no clear
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, rpc, got>>

MutWriterWake ==
    LET r == Min(seen) IN
    /\ wpc = "wake" /\ ~wbuf
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ seen' = seen \ {r}
    /\ wpc' = IF seen' = {} THEN AfterNotify ELSE "wake"
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, got>>

MutWriter == \/ WriterPublish \/ MutWriterCheckSleep \/ MutWriterWake \/ WriterFlush
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
