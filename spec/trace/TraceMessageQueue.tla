------------------------- MODULE TraceMessageQueue -------------------------
(***************************************************************************)
(* Trace validation: a run of the real message queue is a behavior of      *)
(* MessageQueue.                                                           *)
(*                                                                         *)
(* `Trace` is a sequence of step events recorded by                        *)
(* verifiedring.testing.queue_trace.QueueRecorder, a QueueObserver         *)
(* installed on the real writer and readers, each in its own process. A    *)
(* step holds one lock shared by all of them from the point where it       *)
(* starts to act on what a peer can see to its end, and appends its event  *)
(* under that lock, so the recorded order is an order in which the steps   *)
(* happened: a frame is received only after its send's event, a chunk is   *)
(* claimed only after the release that freed it. Each event:               *)
(*   actor   "writer" or "reader<rank>";  rd: the rank, -1 the writer      *)
(*   action  the step name (src/verifiedring/steps.py, QUEUE_STEPS)        *)
(*   seq     the spec's sequence number of the message (the code's + 1);   *)
(*           SHUTDOWN's total for the shutdown steps; 0 where none         *)
(*   obj     the object the step published or delivered, numbered by      *)
(*           enqueue call from 1 by the harness (from the bytes the reader *)
(*           decoded, not from the protocol's headers); -1 a DecodeError;  *)
(*           0 none                                                        *)
(*   kind    the ring chunk a ring step published, took or read: "inline", *)
(*           "overflow", or a run's "first", "more", "last", "abort";     *)
(*           else "" (older traces: "inline")                              *)
(*   part    (optional) the run chunk's part number; absent: not checked   *)
(*                                                                         *)
(* TraceNext replays event step+1 with the action of the same name and     *)
(* requires that the step is that actor's next step in the spec            *)
(* (ReplayStepInv) and that what it moved agrees (ReplayAgreeInv): the     *)
(* published chunk's kind, sequence number, object (and part); the kind,  *)
(* sequence number (and part) of the chunk a reader took or read from the  *)
(* ring, the sequence number it took from a socket; the object or          *)
(* DecodeError it delivered; SHUTDOWN's total. MessageQueue's safety       *)
(* invariants (no frame dropped by a high-water mark, no loss, duplicate,  *)
(* reorder or reused sequence number, ClosedError only after everything)   *)
(* are checked in every replayed state. The trace is valid iff a behavior  *)
(* reaches step = Len(Trace): TLC then reports TraceNotDoneInv.            *)
(*                                                                         *)
(* MessageQueue is instantiated (its definitions are this module's, as     *)
(* with EXTENDS) with the code's design for the run switches and with the  *)
(* run bounds taken from the trace itself, so the trace's cfg sets only    *)
(* the constants below (TLC ignores a cfg value for any other name). M     *)
(* counts ring chunks: the cfg's M (one per WriterPublishChunk) plus the   *)
(* trace's run chunks and ABORTs. The variables are MessageQueue's: a new  *)
(* one there must be declared here too.                                    *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS LocalReaders, RemoteReaders, K, M, LocalHWM, RemoteHWM, Window,
          MaxTimeouts, MaxSendFails, MaxDecodeFails, WaitSubs, SendReady,
          ConsumeReady, PendingDesign, SeqCheck, StashDesign, DecodeAdvances,
          SendFailDesign, CreditSlack, AcksSent

CONSTANT Trace

VARIABLES wpc, pub, wpart, aborts, nseq, nobj, released, sockQ, stash,
          subscribed, acked, rpc, rseq, pending, shutTotal, brokeTotal,
          delivered, rchunk, rfail, lost, timeouts, sendFails, decodeFails,
          wcut, owed, interrupts

\* The trace's events of action a, counted.
TraceCount(a) == Cardinality({i \in 1..Len(Trace) : Trace[i].action = a})
TraceAborts == TraceCount("WriterAbortRun")
TraceRunChunks == TraceCount("WriterPublishRunChunk") + TraceAborts

INSTANCE MessageQueue WITH
    M <- M + TraceRunChunks,
    MaxRunChunks <- M + TraceRunChunks,
    MaxAborts <- TraceAborts,
    RunReleaseDesign <- "after",
    AbortDesign <- "abort",
    ResyncDesign <- "end",
    BreakDesign <- "tell",
    InterruptDesign <- "settle",
    CutDesign <- "owe",
    MaxInterrupts <- 0,
    OldWindow <- "none"

VARIABLE step

traceVars == <<vars, step>>

IsWriterEvent(e) == e.actor = "writer" /\ e.rd = -1
IsReaderEvent(e) == e.rd \in Readers

StepOf(e) ==
    CASE e.action = "WriterHandshake" -> IsWriterEvent(e) /\ WriterHandshake
      [] e.action = "WriterPublishChunk" -> IsWriterEvent(e) /\ WriterPublishChunk
      [] e.action = "WriterPublishRunChunk" -> IsWriterEvent(e) /\ WriterPublishRunChunk
      [] e.action = "WriterAbortRun" -> IsWriterEvent(e) /\ WriterAbortRun
      [] e.action = "WriterSendLocalFrame" -> IsWriterEvent(e) /\ WriterSendLocalFrame
      [] e.action = "WriterSendRemoteFrame" -> IsWriterEvent(e) /\ WriterSendRemoteFrame
      [] e.action = "WriterSendFails" -> IsWriterEvent(e) /\ WriterSendFails
      [] e.action = "WriterShutdown" -> IsWriterEvent(e) /\ WriterShutdown
      [] e.action = "ReaderSubscribe" -> IsReaderEvent(e) /\ ReaderSubscribe(e.rd)
      [] e.action = "ReaderAwaitReady" -> IsReaderEvent(e) /\ ReaderAwaitReady(e.rd)
      [] e.action = "ReaderTakeChunk" -> IsReaderEvent(e) /\ ReaderTakeChunk(e.rd)
      [] e.action = "ReaderReadRunChunk" -> IsReaderEvent(e) /\ ReaderReadRunChunk(e.rd)
      [] e.action = "ReaderReleaseRunChunk" ->
            IsReaderEvent(e) /\ ReaderReleaseRunChunk(e.rd)
      [] e.action = "ReaderRecvFrame" -> IsReaderEvent(e) /\ ReaderRecvFrame(e.rd)
      [] e.action = "ReaderTimeout" -> IsReaderEvent(e) /\ ReaderTimeout(e.rd)
      [] e.action = "ReaderResume" -> IsReaderEvent(e) /\ ReaderResume(e.rd)
      [] e.action = "ReaderStash" -> IsReaderEvent(e) /\ ReaderStash(e.rd)
      [] e.action = "ReaderSeeShutdown" -> IsReaderEvent(e) /\ ReaderSeeShutdown(e.rd)
      [] e.action = "ReaderClose" -> IsReaderEvent(e) /\ ReaderClose(e.rd)
      [] e.action = "RemoteRecvFrame" -> IsReaderEvent(e) /\ RemoteRecvFrame(e.rd)
      [] e.action = "RemoteSeeShutdown" -> IsReaderEvent(e) /\ RemoteSeeShutdown(e.rd)
      [] e.action = "WriterReaderLeft" -> IsWriterEvent(e) /\ WriterReaderLeft
      [] e.action = "WriterInterruptedAfterPublish" ->
            IsWriterEvent(e) /\ WriterInterruptedAfterPublish
      [] e.action = "WriterTellBroken" -> IsWriterEvent(e) /\ WriterTellBroken
      [] e.action = "ReaderSeeBroken" -> IsReaderEvent(e) /\ ReaderSeeBroken(e.rd)
      [] e.action = "ReaderTold" -> IsReaderEvent(e) /\ ReaderTold(e.rd)
      [] e.action = "RemoteSeeBroken" -> IsReaderEvent(e) /\ RemoteSeeBroken(e.rd)
      [] OTHER -> FALSE

\* The reader's delivery after the step is the event's object (or DecodeError).
Delivered(e) ==
    /\ Len(delivered'[e.rd]) = Len(delivered[e.rd]) + 1
    /\ LET d == delivered'[e.rd][Len(delivered'[e.rd])]
       IN  IF e.obj = -1 THEN d[2] = "error" ELSE d = <<e.obj, "ok">>

\* The event's part number, if it has one, is the chunk's.
PartAgrees(c, e) == "part" \in DOMAIN e => c[4] = e.part

\* What the step moved agrees with the event.
Agree(e) ==
    CASE e.action \in {"WriterPublishChunk", "WriterPublishRunChunk", "WriterAbortRun",
                       "WriterInterruptedAfterPublish"} ->
            LET c == pub'[Len(pub')]
            IN  c[1] = e.kind /\ c[2] = e.seq /\ c[3] = e.obj /\ PartAgrees(c, e)
      [] e.action \in {"WriterSendLocalFrame", "WriterSendRemoteFrame", "WriterSendFails"} ->
            e.seq = nseq
      [] e.action \in {"WriterShutdown", "WriterTellBroken"} -> e.seq = nseq - 1
      [] e.action = "WriterReaderLeft" -> e.seq = nseq - 1
      [] e.action = "ReaderTakeChunk" ->
            /\ pub[released[e.rd] + 1][1] = e.kind
            /\ pub[released[e.rd] + 1][2] = e.seq
            /\ PartAgrees(pub[released[e.rd] + 1], e)
            /\ IF e.kind = "inline" THEN Delivered(e) ELSE UNCHANGED delivered
      [] e.action = "ReaderReadRunChunk" ->
            LET c == rchunk'[e.rd][2]
            IN  c[1] = e.kind /\ c[2] = e.seq /\ PartAgrees(c, e)
      [] e.action = "ReaderReleaseRunChunk" ->
            LET c == rchunk[e.rd][2]
            IN  /\ rseq[e.rd] = e.seq
                /\ e.kind # "" => c[1] = e.kind
                /\ PartAgrees(c, e)
                /\ IF c[1] \in {"last", "abort"} THEN Delivered(e)
                                                 ELSE UNCHANGED delivered
      [] e.action = "ReaderRecvFrame" -> pending[e.rd] = e.seq /\ Delivered(e)
      [] e.action = "RemoteRecvFrame" -> rseq[e.rd] = e.seq /\ Delivered(e)
      [] e.action = "ReaderStash" -> Head(sockQ[e.rd])[2] = e.seq
      [] e.action \in {"ReaderTimeout", "ReaderResume"} -> pending[e.rd] = e.seq
      [] e.action \in {"ReaderSeeShutdown", "RemoteSeeShutdown", "ReaderClose"} ->
            shutTotal'[e.rd] = e.seq
      [] e.action \in {"ReaderSeeBroken", "RemoteSeeBroken"} -> brokeTotal'[e.rd] = e.seq
      [] e.action = "ReaderTold" -> rseq[e.rd] - 1 = e.seq
      [] OTHER -> TRUE

\* A run's decode failure is chosen in the spec where it happens (at the
\* FIRST or a later chunk) but seen in the trace only at the run's end (the
\* delivery, a DecodeError). The replay decides it at the FIRST, from the
\* trace: the reader's next ReaderReleaseRunChunk that delivers (obj # 0)
\* delivers an error (-1; an ABORT's error too, which fails either way).
\* Otherwise a branch that chose differently would be a dead end that the
\* Replay invariants report.
RunEndsInError(i, rd) ==
    LET J == {j \in i + 1..Len(Trace) :
                 /\ Trace[j].rd = rd
                 /\ Trace[j].action = "ReaderReleaseRunChunk"
                 /\ Trace[j].obj # 0}
    IN  J # {} /\ Trace[Min(J)].obj = -1

FailAgrees(i) ==
    LET e == Trace[i] IN
    CASE e.action = "ReaderTakeChunk" /\ e.kind = "first" /\ e.rd \in LocalReaders ->
            rfail'[e.rd] = RunEndsInError(i, e.rd)
      [] e.action = "ReaderReadRunChunk" /\ e.rd \in LocalReaders ->
            rfail'[e.rd] = rfail[e.rd]
      [] OTHER -> TRUE

TraceInit == Init /\ step = 0

TraceNext ==
    /\ step < Len(Trace)
    /\ StepOf(Trace[step + 1]) /\ Agree(Trace[step + 1]) /\ FailAgrees(step + 1)
    /\ step' = step + 1

-----------------------------------------------------------------------------
\* Why a trace is rejected: the first of these TLC reports violated.
NextEvent == Trace[step + 1]
Pending == step < Len(Trace)

\* The event is not the actor's next step (order, a guard, an actor).
ReplayStepInv == Pending => ENABLED StepOf(NextEvent)
\* ... it is, but what it moved differs (kind, sequence number, object, total).
ReplayAgreeInv ==
    Pending => ENABLED (StepOf(NextEvent) /\ Agree(NextEvent) /\ FailAgrees(step + 1))

\* Expected to be VIOLATED: its violation means the whole trace was replayed.
TraceNotDoneInv == Pending
=============================================================================
