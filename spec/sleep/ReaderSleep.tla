---------------------------- MODULE ReaderSleep ----------------------------
(***************************************************************************)
(* The idle reader's sleep and the writer's wake-up (the classic           *)
(* lost-wakeup protocol), as implemented by ReaderCursor.sleep and         *)
(* WriterCursor.wake_sleepers in src/verifiedring/cursors.py, over an      *)
(* abstract ring: `pub` messages are published, reader r has consumed      *)
(* got[r] of them, the writer waits for room while NChunks are unread.     *)
(*                                                                         *)
(* Shared memory:  pub (what WriterPublish's store made visible), and one  *)
(* sleep word per reader, asleep[r] (layout.py: 1 = announced or blocked). *)
(*                                                                         *)
(* Each load or store is its own step, named as in the code (`# spec:`),   *)
(* in src/verifiedring/steps.py (SLEEP_STEPS) and in the rules of          *)
(* tests/test_ring_stateful.py.  The reader's poll is abstracted into one  *)
(* load, ReaderPollWritten: its own read flag is stored only by itself and *)
(* by the writer before WriterPublish, so what decides the poll is the     *)
(* load of `written` against WriterPublish's store (RingBuffer.tla has the *)
(* two loads).  The writer's WriterCheckSleep is one copy of every sleep   *)
(* word: several loads in some order, between which the writer does       *)
(* nothing; each reader's correctness depends only on its own word, so     *)
(* (under sequential consistency) the copy is as good as a snapshot.       *)
(*                                                                         *)
(* ReaderBlock is the futex wait: atomically, block iff the word is still  *)
(* 1.  A blocked reader has no step until WriterWake; there is no timeout  *)
(* action, so a lost wake-up is a reader blocked forever (liveness), and   *)
(* NoLostWakeupInv names it at once.                                       *)
(*                                                                         *)
(* Store buffers (relaxed memory, TSO-like): FenceReader / FenceWriter     *)
(* FALSE drop FS1 / FS2; the reader's announce store / the writer's        *)
(* publish store then waits in its store buffer (ReaderFlush /             *)
(* WriterFlush commit it) while later loads read memory.  A futex call     *)
(* (wait or wake) drains the caller's buffer: the kernel's smp_mb.         *)
(***************************************************************************)
EXTENDS Integers, FiniteSets

CONSTANTS
    NReaders,      \* n_reader
    NChunks,       \* max_chunks: the writer waits while NChunks are unread
    MaxMsgs,       \* bound: messages the writer sends
    FenceReader,   \* FS1: ReaderAnnounceSleep's store before the re-check's loads
    FenceWriter    \* FS2: WriterPublish's store before WriterCheckSleep's loads

ASSUME /\ NReaders \in Nat \ {0}
       /\ NChunks \in Nat \ {0}
       /\ MaxMsgs \in Nat \ {0}
       /\ FenceReader \in BOOLEAN
       /\ FenceWriter \in BOOLEAN

Readers == 0 .. NReaders - 1

VARIABLES
    pub, asleep,          \* shared memory
    wbuf, rbuf,           \* store buffers: a store not yet visible
    wpc, sent, seen,      \* writer
    rpc, got              \* readers

vars == <<pub, asleep, wbuf, rbuf, wpc, sent, seen, rpc, got>>

WriterPCs == {"publish", "check", "clear", "wake", "done"}
\* "poll": the normal poll; "announce": the wait outlasted its spin;
\* "recheck": the re-check poll; "block": about to futex-wait; "blocked";
\* "end": woke (or the word was 0); "endready": the re-check succeeded.
ReaderPCs == {"poll", "announce", "recheck", "block", "blocked", "end", "endready",
              "read", "done"}

TypeOK ==
    /\ pub \in 0 .. MaxMsgs
    /\ asleep \in [Readers -> {0, 1}]
    /\ wbuf \in BOOLEAN
    /\ rbuf \in [Readers -> BOOLEAN]
    /\ wpc \in WriterPCs
    /\ sent \in 0 .. MaxMsgs
    /\ seen \subseteq Readers
    /\ rpc \in [Readers -> ReaderPCs]
    /\ got \in [Readers -> 0 .. MaxMsgs]

Init ==
    /\ pub = 0 /\ asleep = [r \in Readers |-> 0]
    /\ wbuf = FALSE /\ rbuf = [r \in Readers |-> FALSE]
    /\ wpc = "publish" /\ sent = 0 /\ seen = {}
    /\ rpc = [r \in Readers |-> "poll"] /\ got = [r \in Readers |-> 0]

Min(S) == CHOOSE x \in S : \A y \in S : x <= y
Room == \A r \in Readers : sent - got[r] < NChunks
AfterNotify == IF sent = MaxMsgs THEN "done" ELSE "publish"

-----------------------------------------------------------------------------
(*************************************** writer ****************************)

\* cursors.py: WriterCursor.__exit__ (WriterPublish), once its poll found
\* room (abstracted: Room).  With FS2 the store is visible before the next
\* load; without, it waits in the store buffer.
WriterPublish ==
    /\ wpc = "publish" /\ Room /\ ~wbuf
    /\ sent' = sent + 1
    /\ IF FenceWriter THEN pub' = pub + 1 /\ UNCHANGED wbuf
                      ELSE wbuf' = TRUE /\ UNCHANGED pub
    /\ wpc' = "check"
    /\ UNCHANGED <<asleep, rbuf, seen, rpc, got>>

\* cursors.py: WriterCursor.wake_sleepers (WriterCheckSleep): after FS2, one
\* copy of every sleep word; none is 1: done until the next publish.
WriterCheckSleep ==
    /\ wpc = "check"
    /\ seen' = {r \in Readers : asleep[r] = 1}
    /\ wpc' = IF seen' = {} THEN AfterNotify ELSE "clear"
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, rpc, got>>

\* cursors.py: WriterCursor._wake (WriterClearSleep): for the first reader
\* seen 1, store its word = 0.
WriterClearSleep ==
    /\ wpc = "clear"
    /\ asleep' = [asleep EXCEPT ![Min(seen)] = 0]
    /\ wpc' = "wake"
    /\ UNCHANGED <<pub, wbuf, rbuf, sent, seen, rpc, got>>

\* cursors.py: WriterCursor._wake (WriterWake): futex wake on that word; a
\* reader blocked on it runs again.  A syscall with a full barrier: the
\* writer's store buffer drains first.
WriterWake ==
    LET r == Min(seen) IN
    /\ wpc = "wake" /\ ~wbuf
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ seen' = seen \ {r}
    /\ wpc' = IF seen' = {} THEN AfterNotify ELSE "clear"
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, got>>

\* The writer's buffered publish store becomes visible (no FS2 only).
WriterFlush ==
    /\ wbuf
    /\ pub' = pub + 1
    /\ wbuf' = FALSE
    /\ UNCHANGED <<asleep, rbuf, wpc, sent, seen, rpc, got>>

-----------------------------------------------------------------------------
(*************************************** readers ***************************)

\* cursors.py: ReaderCursor.poll (ReaderPollWritten, abstracted; see the
\* header): the normal poll ("poll") and the re-check ("recheck") are the
\* same steps.  A failed normal poll polls again or, once the spin is over,
\* goes to sleep (the code decides by the clock: both are allowed here).
ReaderPollWritten(r) ==
    LET ready == got[r] < pub IN
    /\ rpc[r] \in {"poll", "recheck"}
    /\ IF rpc[r] = "poll"
         THEN rpc' = [rpc EXCEPT ![r] = IF ready THEN "read" ELSE "announce"]
         ELSE rpc' = [rpc EXCEPT ![r] = IF ready THEN "endready" ELSE "block"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got>>

\* cursors.py: ReaderCursor.sleep (ReaderAnnounceSleep): store own word = 1,
\* then FS1 (without it the store waits in the store buffer).
ReaderAnnounceSleep(r) ==
    /\ rpc[r] = "announce"
    /\ IF FenceReader THEN asleep' = [asleep EXCEPT ![r] = 1] /\ UNCHANGED rbuf
                      ELSE rbuf' = [rbuf EXCEPT ![r] = TRUE] /\ UNCHANGED asleep
    /\ rpc' = [rpc EXCEPT ![r] = "recheck"]
    /\ UNCHANGED <<pub, wbuf, wpc, sent, seen, got>>

\* The reader's buffered announce store becomes visible (no FS1 only).
ReaderFlush(r) ==
    /\ rbuf[r]
    /\ asleep' = [asleep EXCEPT ![r] = 1]
    /\ rbuf' = [rbuf EXCEPT ![r] = FALSE]
    /\ UNCHANGED <<pub, wbuf, wpc, sent, seen, rpc, got>>

\* cursors.py: ReaderCursor.sleep (ReaderBlock): the futex wait, atomically:
\* block iff the word is still 1 (the kernel drains the store buffer first).
ReaderBlock(r) ==
    /\ rpc[r] = "block" /\ ~rbuf[r]
    /\ rpc' = [rpc EXCEPT ![r] = IF asleep[r] = 1 THEN "blocked" ELSE "end"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got>>

\* cursors.py: ReaderCursor.sleep (ReaderEndSleep): store own word = 0; then
\* the wait polls again, or (the re-check succeeded) the caller reads.
ReaderEndSleep(r) ==
    /\ rpc[r] \in {"end", "endready"} /\ ~rbuf[r]
    /\ asleep' = [asleep EXCEPT ![r] = 0]
    /\ rpc' = [rpc EXCEPT ![r] = IF rpc[r] = "endready" THEN "read" ELSE "poll"]
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, got>>

\* cursors.py: ReaderCursor.__exit__ (ReaderRelease): the message is consumed.
ReaderRelease(r) ==
    /\ rpc[r] = "read"
    /\ got' = [got EXCEPT ![r] = @ + 1]
    /\ rpc' = [rpc EXCEPT ![r] = IF got[r] + 1 = MaxMsgs THEN "done" ELSE "poll"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen>>

-----------------------------------------------------------------------------
AllDone == wpc = "done" /\ ~wbuf /\ \A r \in Readers : rpc[r] = "done"
Done == AllDone /\ UNCHANGED vars

Writer == \/ WriterPublish \/ WriterCheckSleep \/ WriterClearSleep \/ WriterWake
          \/ WriterFlush
Reader(r) == \/ ReaderPollWritten(r) \/ ReaderAnnounceSleep(r) \/ ReaderFlush(r)
             \/ ReaderBlock(r) \/ ReaderEndSleep(r) \/ ReaderRelease(r)

Next == Writer \/ (\E r \in Readers : Reader(r)) \/ Done

\* Weak fairness of the writer and of each reader; no timeout action.
Fairness == WF_vars(Writer) /\ \A r \in Readers : WF_vars(Reader(r))
Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(*************************************** properties ************************)

TypeOKInv == TypeOK

\* A reader blocked while a message it has not read is published is about
\* to be woken for it: the writer has that publish's check still to make,
\* or has seen this reader's word and not yet woken it.
NoLostWakeupInv ==
    \A r \in Readers :
        rpc[r] = "blocked" /\ got[r] < pub =>
            \/ wpc = "check"
            \/ wpc \in {"clear", "wake"} /\ r \in seen

\* A blocked reader's word is 1, until the writer clears it right before
\* the wake that unblocks it.
BlockedIsAsleepInv ==
    \A r \in Readers : rpc[r] = "blocked" =>
        asleep[r] = 1 \/ (wpc = "wake" /\ r = Min(seen))

\* Every published message is read by every reader (no timeout needed).
EveryMessageReadProp ==
    \A r \in Readers : \A k \in 1 .. MaxMsgs : (pub >= k) ~> (got[r] >= k)

\* The bounded run completes.
AllDoneProp == <>AllDone
=============================================================================
