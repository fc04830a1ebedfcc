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
(*   is the same here) on the local socket, stores the ring's ended word   *)
(*   (WriterMarkEnded), then wakes every reader (writer_control.py:        *)
(*   end_local_readers, then WriterSide.wake_all: for each reader, clear   *)
(*   its word, then wake it).  The frame reaches each reader's socket      *)
(*   later, when ZeroMQ's IO threads deliver it (FrameArrive: no code's    *)
(*   step, and no bound on when).  A reader's normal poll looks at its     *)
(*   socket only every SLICE (it may or may not see the frame); its        *)
(*   re-check before a block loads the ended word (ReaderSeeEnded), and    *)
(*   once it is 1 clears its own sleep word, so the block after returns at *)
(*   once, and looks at its socket (local_path.py, _recheck_ring: it       *)
(*   waits there up to FRAME_WAIT_MS);                                     *)
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
    framed,   \* the writer has sent its frame (in flight until it arrives)
    arrived,  \* per reader: the frame is on its socket
    endedWord,  \* the ring's ended word (layout.py): 1 once the frame is sent
    lookEnded,  \* per reader: its re-check failed; its load of the ended word is next
    wa,       \* the writer's wake_all: NoWakeAll, or <<reader, "clear" | "wake">>
    irq,      \* interrupts delivered so far
    ended     \* per reader: its poll saw stop or the frame (it leaves the wait)

frameVars == <<arrived, endedWord, lookEnded>>
wakeVars == <<stop, cpc, framed, wa, irq, ended, frameVars>>
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
    /\ arrived \in [Readers -> BOOLEAN]
    /\ endedWord \in BOOLEAN
    /\ lookEnded \in [Readers -> BOOLEAN]

WakeInit ==
    /\ Init
    /\ stop = [r \in Readers |-> FALSE] /\ cpc = [r \in Readers |-> "idle"]
    /\ framed = FALSE /\ wa = NoWakeAll /\ irq = 0
    /\ ended = [r \in Readers |-> FALSE]
    /\ arrived = [r \in Readers |-> FALSE] /\ endedWord = FALSE
    /\ lookEnded = [r \in Readers |-> FALSE]

\* What a reader waits for besides messages: then it does not stop at MaxMsgs.
Waits == Cuts \/ Frame

\* wake_all from reader 0; after the last, nothing.
StartWakeAll == <<0, "clear">>
NextWakeAll(r) == IF r + 1 < NReaders THEN <<r + 1, "clear">> ELSE NoWakeAll

-----------------------------------------------------------------------------
(*************************************** the cutter ************************)

\* cursor_base.py: ReaderSide.cut_sleep (CutterSetStop): the caller's store of
\* what the reader is to see (reader_waits.py: `shutting_down`; writer_watch.py:
\* the reader's look-now), before the clear.
CutterSetStop(r) ==
    /\ Cuts /\ cpc[r] = "idle"
    /\ stop' = [stop EXCEPT ![r] = TRUE]
    /\ cpc' = [cpc EXCEPT ![r] = "clear"]
    /\ UNCHANGED <<vars, framed, wa, irq, ended, frameVars>>

\* cut_sleep (CutterClearSleep): the reader's sleep word = 0.
CutterClearSleep(r) ==
    /\ cpc[r] = "clear"
    /\ asleep' = [asleep EXCEPT ![r] = 0]
    /\ cpc' = [cpc EXCEPT ![r] = "wake"]
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, rpc, got, stop, framed, wa, irq,
                   ended, frameVars>>

\* cut_sleep (CutterWake): futex wake on that word.
CutterWake(r) ==
    /\ cpc[r] = "wake"
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ cpc' = [cpc EXCEPT ![r] = "done"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, stop, framed, wa, irq,
                   ended, frameVars>>

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
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, sent, rpc, got, stop, cpc, framed, ended, frameVars>>

\* writer_control.py, tell_shutdown (MessageQueue.tla's WriterShutdown): after
\* the last message, SHUTDOWN on the local socket: sent, not yet on any reader's socket.
WriterShutdown ==
    /\ Frame /\ wpc = "done" /\ ~wbuf /\ ~framed /\ wa = NoWakeAll
    /\ framed' = TRUE
    /\ UNCHANGED <<vars, stop, cpc, wa, irq, ended, frameVars>>

\* cursor_base.py: WriterSide.mark_ended (WriterMarkEnded): the ended word = 1,
\* after the frame's send; then wake_all.
WriterMarkEnded ==
    /\ framed /\ ~endedWord /\ wa = NoWakeAll
    /\ endedWord' = TRUE
    /\ wa' = StartWakeAll
    /\ UNCHANGED <<vars, stop, cpc, framed, irq, ended, arrived, lookEnded>>

\* ZeroMQ delivers the sent frame to reader r's socket (its IO threads: any time
\* after the send; no code's step).
FrameArrive(r) ==
    /\ framed /\ ~arrived[r]
    /\ arrived' = [arrived EXCEPT ![r] = TRUE]
    /\ UNCHANGED <<vars, stop, cpc, framed, wa, irq, ended, endedWord, lookEnded>>

\* cursor_base.py: WriterSide.wake_all (WriterWakeAllClear): reader r's word = 0.
WriterWakeAllClear ==
    /\ wa # NoWakeAll /\ wa[2] = "clear"
    /\ asleep' = [asleep EXCEPT ![wa[1]] = 0]
    /\ wa' = <<wa[1], "wake">>
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, rpc, got, stop, cpc, framed, irq,
                   ended, frameVars>>

\* wake_all (WriterWakeAllWake): futex wake on that word (the writer's store
\* buffer drains: the kernel's barrier).
WriterWakeAllWake ==
    LET r == wa[1] IN
    /\ wa # NoWakeAll /\ wa[2] = "wake" /\ ~wbuf
    /\ rpc' = IF rpc[r] = "blocked" THEN [rpc EXCEPT ![r] = "end"] ELSE rpc
    /\ wa' = NextWakeAll(r)
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, stop, cpc, framed, irq,
                   ended, frameVars>>

WakeWriter == WriterStep \/ WriterInterruptedInWake \/ WriterShutdown \/ WriterMarkEnded
              \/ WriterWakeAllClear \/ WriterWakeAllWake

-----------------------------------------------------------------------------
(*************************************** readers ***************************)

\* What the poll in rpc[r] sees besides the ring: stop always; the frame on
\* its socket in the re-check once the ended word is 1 (it then looks however
\* recent its last look), in any poll maybe (its timed socket look).  The
\* re-check's load of the ended word comes after its ring poll in the code
\* (ReaderSeeEnded); both words only ever go 0 -> 1, so what this step sees the
\* later load sees too.
MustSee(r) == stop[r] \/ (arrived[r] /\ endedWord /\ rpc[r] = "recheck")
MaySee(r) == stop[r] \/ arrived[r]

\* ReaderSleep's ReaderPollWritten, when it finds nothing besides: the ring
\* is looked at first, so a published message is still taken.  A re-check that
\* finds nothing goes on to its load of the ended word (lookEnded).
ReaderPoll(r) ==
    /\ ~ended[r]
    /\ ReaderPollWritten(r)
    /\ ~(got[r] >= pub /\ MustSee(r))
    /\ lookEnded' = [lookEnded EXCEPT ![r] = rpc[r] = "recheck" /\ got[r] >= pub]
    /\ UNCHANGED <<stop, cpc, framed, wa, irq, ended, arrived, endedWord>>

\* cursor_base.py: ReaderSide.see_ended (ReaderSeeEnded): the failed re-check
\* loads the ended word; 1: the reader clears its own sleep word, so its block
\* returns at once (ReaderBlock sees 0) and its wait polls again.
ReaderSeeEnded(r) ==
    /\ rpc[r] = "block" /\ lookEnded[r] /\ ~rbuf[r]
    /\ lookEnded' = [lookEnded EXCEPT ![r] = FALSE]
    /\ asleep' = IF endedWord THEN [asleep EXCEPT ![r] = 0] ELSE asleep
    /\ UNCHANGED <<pub, wbuf, rbuf, wpc, sent, seen, rpc, got, stop, cpc, framed, wa, irq,
                   ended, arrived, endedWord>>

\* local_path.py / flavors/overflow.py (ReaderSeeStop): nothing on the ring,
\* and the poll sees stop (CancelledError, or the dead writer named) or the
\* frame (ClosedError): the wait ends (ReaderLeave); from the re-check, through its
\* sleep's end (ReaderEndSleep).
ReaderSeeStop(r) ==
    /\ rpc[r] \in {"poll", "recheck"} /\ ~ended[r]
    /\ got[r] >= pub /\ MaySee(r)
    /\ ended' = [ended EXCEPT ![r] = TRUE]
    /\ rpc' = [rpc EXCEPT ![r] = IF rpc[r] = "recheck" THEN "end" ELSE "done"]
    /\ UNCHANGED <<pub, asleep, wbuf, rbuf, wpc, sent, seen, got, stop, cpc, framed, wa,
                   irq, frameVars>>

\* local_path.py (ReaderLeave): the ended wait raises, out of the wait loop.
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

\* The rest of ReaderSleep's reader steps, as they are (the block after the
\* re-check's load of the ended word).
ReaderSame(r) ==
    /\ \/ ReaderAnnounceSleep(r) \/ ReaderFlush(r) \/ (ReaderBlock(r) /\ ~lookEnded[r])
       \/ ReaderEndSleep(r)
    /\ UNCHANGED wakeVars

WakeReader(r) == \/ ReaderPoll(r) \/ ReaderSeeEnded(r) \/ ReaderSeeStop(r) \/ ReaderLeave(r)
                 \/ ReaderSame(r) \/ ReaderReleaseW(r)

\* Every reader has left (a writer with messages left then waits for room that
\* no reader makes: its wait times out in the code, not here).
WakeDone == wa = NoWakeAll /\ \A r \in Readers : rpc[r] = "done"
WakeNext == WakeWriter \/ (\E r \in Readers : WakeReader(r) \/ Cutter(r) \/ FrameArrive(r))
            \/ (WakeDone /\ UNCHANGED allVars)

\* Weak fairness of the writer, of each reader, of each cutter once it has
\* begun (a shutdown() may never be called: CutterSetStop is not fair) and of
\* ZeroMQ's delivery (a sent frame arrives, however late).
WakeFairness ==
    /\ WF_allVars(WakeWriter)
    /\ \A r \in Readers : WF_allVars(WakeReader(r))
    /\ \A r \in Readers : WF_allVars(CutterClearSleep(r) \/ CutterWake(r))
    /\ \A r \in Readers : WF_allVars(FrameArrive(r))
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

\* A reader blocked after its cutter set stop, or after the ended word was
\* stored (its frame sent, maybe still in flight), is about to be woken by that
\* cutter or by wake_all.
NoLostCutInv ==
    \A r \in Readers :
        rpc[r] = "blocked" =>
            /\ stop[r] => cpc[r] \in {"clear", "wake"}
            /\ endedWord => WakeAllAhead(r)

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
