------------------------ MODULE MutWakeBeforePublish ------------------------
(* Lost wake-up (c): the writer checks the sleep words before it publishes *)
(* (and wakes whom it saw then).  A reader whose re-check ran before the   *)
(* publish and whose announcement came after the check blocks with the     *)
(* message published: it is woken only by the next message's check, and   *)
(* the last message's never comes.  Expected: NoLostWakeupInv.            *)
EXTENDS ReaderSleep

MutAfterPublish == IF sent + 1 = MaxMsgs THEN "done" ELSE "check"

\* The writer starts at the check; the publish follows the wakes.
MutWriterPublish ==
    /\ wpc = "publish" /\ Room /\ ~wbuf
    /\ sent' = sent + 1
    /\ pub' = pub + 1
    /\ wpc' = MutAfterPublish
    /\ UNCHANGED <<asleep, wbuf, rbuf, seen, rpc, got>>

MutWriterCheckSleep ==          \* BUG: before the publish
    /\ wpc = "check"
    /\ seen' = {r \in Readers : asleep[r] = 1}
    /\ wpc' = IF seen' = {} THEN "publish" ELSE "clear"
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, rpc, got>>

MutWriterWake ==
    LET r == Min(seen) IN
    /\ wpc = "wake"
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ seen' = seen \ {r}
    /\ wpc' = IF seen' = {} THEN "publish" ELSE "clear"
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, got>>

MutWriter == \/ MutWriterPublish \/ MutWriterCheckSleep \/ WriterClearSleep
             \/ MutWriterWake
MutInitState ==
    /\ pub = 0 /\ asleep = [r \in Readers |-> 0]
    /\ wbuf = FALSE /\ rbuf = [r \in Readers |-> FALSE]
    /\ wpc = "check" /\ sent = 0 /\ seen = {}
    /\ rpc = [r \in Readers |-> "poll"] /\ got = [r \in Readers |-> 0]
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == MutInitState /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
