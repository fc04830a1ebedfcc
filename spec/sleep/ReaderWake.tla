----------------------------- MODULE ReaderWake -----------------------------
(***************************************************************************)
(* The wake sources of an idle reader besides WriterPublish's wake-up, on  *)
(* top of ReaderSleep.tla (its ring, sleep words and steps, unchanged):    *)
(*                                                                         *)
(* * a cutter: another thread of the reader's process -- its shutdown(),  *)
(*   or its writer watch when the kernel closes the dead writer's end of   *)
(*   the local socket -- sets what the woken reader is to see (stop[r]:    *)
(*   `shutting_down`, or the look-now that makes its next poll watch the   *)
(*   writer), then clears the reader's sleep word, then wakes it           *)
(*   (cursor_base.py: ReaderSide.cut_sleep);                               *)
(* * the writer's frame: after its last message it sends SHUTDOWN (BROKEN  *)
(*   is the same here) on the local socket, then wakes every reader        *)
(*   (writer_end.py / writer_base.py, then WriterSide.wake_all: for each   *)
(*   reader, clear its word, then wake it).  A reader's normal poll looks  *)
(*   at its socket only every SLICE (it may or may not see the frame); the *)
(*   re-check before a block always looks (local_reader.py);              *)
(* * an interrupt of the writer in its wake-up: CPython delivers a pending *)
(*   signal at the entry of wake_sleepers and at the return of each call   *)
(*   in it (the fence, the copy of the words, each futex wake), never      *)
(*   between a word's clear and its wake (no call between them).  The      *)
(*   exception leaves publish through its handler, which wakes every       *)
(*   reader as wake_all does (cursors.py: WriterInterruptedInWake).        *)
(*                                                                         *)
(* The cutter is a thread of the reader's process: the GIL hands over with *)
(* a full barrier, so its steps are sequentially consistent with the       *)
(* reader's.  As in ReaderSleep there is no timeout action: a wake lost is *)
(* a reader blocked for ever, and the invariants name it at once.          *)
(***************************************************************************)
EXTENDS ReaderSleep

CONSTANTS
    Cuts,          \* each reader has a cutter (shutdown() or its writer watch)
    Frame,         \* the writer ends with a frame (SHUTDOWN) and wake_all
    MaxInterrupts  \* interrupts of the writer's wake-up

ASSUME /\ Cuts \in BOOLEAN
       /\ Frame \in BOOLEAN
       /\ MaxInterrupts \in Nat

VARIABLES
    stop,     \* per reader: what its cutter set (seen by every poll)
    cpc,      \* per reader: its cutter's next step
    framed,   \* the writer's frame is on the readers' sockets
    wa,       \* the writer's wake_all: NoWakeAll, or <<reader, "clear" | "wake">>
    irq,      \* interrupts delivered so far
    ended     \* per reader: its poll saw stop or the frame (it leaves the wait)

wakeVars == <<stop, cpc, framed, wa, irq, ended>>
allVars == <<vars, wakeVars>>

CutterPCs == {"idle", "clear", "wake", "done"}
NoWakeAll == <<-1, "none">>
WakeAllPCs == {NoWakeAll} \cup (Readers \X {"clear", "wake"})

WakeTypeOK ==
    /\ TypeOK
    /\ stop \in [Readers -> BOOLEAN]
    /\ cpc \in [Readers -> CutterPCs]
    /\ framed \in BOOLEAN
    /\ wa \in WakeAllPCs
    /\ irq \in 0 .. MaxInterrupts
    /\ ended \in [Readers -> BOOLEAN]

WakeInit ==
    /\ Init
    /\ stop = [r \in Readers |-> FALSE] /\ cpc = [r \in Readers |-> "idle"]
    /\ framed = FALSE /\ wa = NoWakeAll /\ irq = 0
    /\ ended = [r \in Readers |-> FALSE]

\* What a reader waits for besides messages: then it does not stop at MaxMsgs.
Waits == Cuts \/ Frame

\* wake_all from reader 0; after the last, nothing.
StartWakeAll == <<0, "clear">>
NextWakeAll(r) == IF r + 1 < NReaders THEN <<r + 1, "clear">> ELSE NoWakeAll

-----------------------------------------------------------------------------
(*************************************** the cutter ************************)

\* cursor_base.py: ReaderSide.cut_sleep (CutterSetStop): the caller's store of
\* what the reader is to see (reader.py: `shutting_down`; writer_watch.py: the
\* reader's look-now), before the clear.
CutterSetStop(r) ==
    /\ Cuts /\ cpc[r] = "idle"
    /\ stop' = [stop EXCEPT ![r] = TRUE]
    /\ cpc' = [cpc EXCEPT ![r] = "clear"]
    /\ UNCHANGED <<vars, framed, wa, irq, ended>>

\* cut_sleep (CutterClearSleep): the reader's sleep word = 0.
CutterClearSleep(r) ==
    /\ cpc[r] = "clear"
    /\ asleep' = [asleep EXCEPT ![r] = 0]
    /\ cpc' = [cpc EXCEPT ![r] = "wake"]
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, rpc, got, stop, framed, wa, irq,
                   ended>>

\* cut_sleep (CutterWake): futex wake on that word.
CutterWake(r) ==
    /\ cpc[r] = "wake"
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ cpc' = [cpc EXCEPT ![r] = "done"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, stop, framed, wa, irq,
                   ended>>

Cutter(r) == CutterSetStop(r) \/ CutterClearSleep(r) \/ CutterWake(r)

-----------------------------------------------------------------------------
(*************************************** the writer ************************)

\* ReaderSleep's writer steps, while no wake_all is under way.
WriterStep == wa = NoWakeAll /\ Writer /\ UNCHANGED wakeVars

\* cursors.py: WriterCursor.publish (WriterInterruptedInWake): an exception
\* at the entry of wake_sleepers or at the return of one of its calls; the
\* handler wakes every reader (wake_all), then the exception leaves publish.
WriterInterruptedInWake ==
    /\ irq < MaxInterrupts /\ wa = NoWakeAll /\ ~wbuf
    /\ wpc \in {"check", "clear"}
    /\ irq' = irq + 1
    /\ seen' = {}
    /\ wpc' = AfterNotify
    /\ wa' = StartWakeAll
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, rpc, got, stop, cpc, framed, ended>>

\* writer_end.py (MessageQueue.tla's WriterShutdown): after the last message,
\* SHUTDOWN on the local socket; then wake_all.
WriterShutdown ==
    /\ Frame /\ wpc = "done" /\ ~wbuf /\ ~framed /\ wa = NoWakeAll
    /\ framed' = TRUE
    /\ wa' = StartWakeAll
    /\ UNCHANGED <<vars, stop, cpc, irq, ended>>

\* cursor_base.py: WriterSide.wake_all (WriterWakeAllClear): reader r's word = 0.
WriterWakeAllClear ==
    /\ wa # NoWakeAll /\ wa[2] = "clear"
    /\ asleep' = [asleep EXCEPT ![wa[1]] = 0]
    /\ wa' = <<wa[1], "wake">>
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, rpc, got, stop, cpc, framed, irq,
                   ended>>

\* wake_all (WriterWakeAllWake): futex wake on that word (the writer's store
\* buffer drains: the kernel's barrier).
WriterWakeAllWake ==
    LET r == wa[1] IN
    /\ wa # NoWakeAll /\ wa[2] = "wake" /\ ~wbuf
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ wa' = NextWakeAll(r)
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, stop, cpc, framed, irq,
                   ended>>

WakeWriter == WriterStep \/ WriterInterruptedInWake \/ WriterShutdown
              \/ WriterWakeAllClear \/ WriterWakeAllWake

-----------------------------------------------------------------------------
(*************************************** readers ***************************)

\* What the poll in rpc[r] sees besides the ring: stop always; the frame in
\* the re-check always, in the normal poll maybe (its timed socket look).
MustSee(r) == stop[r] \/ (framed /\ rpc[r] = "recheck")
MaySee(r) == stop[r] \/ framed

\* ReaderSleep's ReaderPollWritten, when it finds nothing besides: the ring
\* is looked at first, so a published message is still taken.
ReaderPoll(r) ==
    /\ ~ended[r]
    /\ ReaderPollWritten(r)
    /\ ~(got[r] >= pub /\ MustSee(r))
    /\ UNCHANGED wakeVars

\* local_reader.py / flavors/overflow.py (ReaderSeeStop): nothing on the ring,
\* and the poll sees stop (CancelledError, or the dead writer named) or the
\* frame (ClosedError): the wait ends (ReaderLeave); from the re-check, through its
\* sleep's end (ReaderEndSleep).
ReaderSeeStop(r) ==
    /\ rpc[r] \in {"poll", "recheck"} /\ ~ended[r]
    /\ got[r] >= pub /\ MaySee(r)
    /\ ended' = [ended EXCEPT ![r] = TRUE]
    /\ rpc' = [rpc EXCEPT ![r] = IF rpc[r] = "recheck" THEN "end" ELSE "done"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, stop, cpc, framed, wa,
                   irq>>

\* local_reader.py (ReaderLeave): the ended wait raises, out of the wait loop.
ReaderLeave(r) ==
    /\ ended[r] /\ rpc[r] = "poll"
    /\ rpc' = [rpc EXCEPT ![r] = "done"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, wakeVars>>

\* ReaderSleep's ReaderRelease, except that a reader that waits for more than
\* messages goes on polling after the last one.
ReaderReleaseW(r) ==
    /\ rpc[r] = "read"
    /\ got' = [got EXCEPT ![r] = @ + 1]
    /\ rpc' = [rpc EXCEPT ![r] = IF got[r] + 1 = MaxMsgs /\ ~Waits THEN "done" ELSE "poll"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, wakeVars>>

\* The rest of ReaderSleep's reader steps, as they are.
ReaderSame(r) ==
    /\ \/ ReaderAnnounceSleep(r) \/ ReaderFlush(r) \/ ReaderBlock(r) \/ ReaderEndSleep(r)
    /\ UNCHANGED wakeVars

WakeReader(r) == \/ ReaderPoll(r) \/ ReaderSeeStop(r) \/ ReaderLeave(r) \/ ReaderSame(r)
                 \/ ReaderReleaseW(r)

\* Every reader has left (a writer with messages left then waits for room that
\* no reader makes: its wait times out in the code, not here).
WakeDone == wa = NoWakeAll /\ \A r \in Readers : rpc[r] = "done"
WakeNext == WakeWriter \/ (\E r \in Readers : WakeReader(r) \/ Cutter(r))
            \/ (WakeDone /\ UNCHANGED allVars)

\* Weak fairness of the writer, of each reader and of each cutter once it has
\* begun (a shutdown() may never be called: CutterSetStop is not fair).
WakeFairness ==
    /\ WF_allVars(WakeWriter)
    /\ \A r \in Readers : WF_allVars(WakeReader(r))
    /\ \A r \in Readers : WF_allVars(CutterClearSleep(r) \/ CutterWake(r))
WakeSpec == WakeInit /\ [][WakeNext]_allVars /\ WakeFairness

-----------------------------------------------------------------------------
(*************************************** properties ************************)

WakeTypeOKInv == WakeTypeOK

\* wake_all has reader r still ahead of it.
WakeAllAhead(r) == wa[1] >= 0 /\ wa[1] <= r

\* ReaderSleep's NoLostWakeupInv, with two more wakes still to come: the
\* interrupt's wake_all, and a cutter's wake after its clear (the clear may
\* have made the writer's check see 0).
NoLostWakeupWInv ==
    \A r \in Readers :
        rpc[r] = "blocked" /\ got[r] < pub =>
            \/ wpc = "check"
            \/ wpc \in {"clear", "wake"} /\ r \in seen
            \/ WakeAllAhead(r)
            \/ cpc[r] = "wake"

\* A reader blocked after its cutter set stop, or after the frame was sent,
\* is about to be woken by that cutter or by wake_all.
NoLostCutInv ==
    \A r \in Readers :
        rpc[r] = "blocked" =>
            /\ stop[r] => cpc[r] \in {"clear", "wake"}
            /\ framed => WakeAllAhead(r)

\* A blocked reader's word is 1, until a clear right before the wake that
\* unblocks it.
BlockedIsAsleepWInv ==
    \A r \in Readers : rpc[r] = "blocked" =>
        \/ asleep[r] = 1
        \/ wpc = "wake" /\ r = Min(seen)
        \/ cpc[r] = "wake"
        \/ wa = <<r, "wake">>

\* Every published message is read by every reader that does not stop first.
EveryMessageReadWProp ==
    \A r \in Readers : \A k \in 1 .. MaxMsgs :
        (pub >= k) ~> (got[r] >= k \/ ended[r])

\* What a cutter set, and the frame, end the reader's wait.
StopSeenProp == \A r \in Readers : stop[r] ~> rpc[r] = "done"
FrameSeenProp == \A r \in Readers : framed ~> rpc[r] = "done"
=============================================================================
