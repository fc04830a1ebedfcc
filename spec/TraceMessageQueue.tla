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
(*   kind    "inline" or "overflow" for the ring steps, else ""            *)
(*                                                                         *)
(* TraceNext replays event step+1 with the action of the same name and     *)
(* requires that the step is that actor's next step in the spec            *)
(* (ReplayStepInv) and that what it moved agrees (ReplayAgreeInv): the     *)
(* published chunk's kind, sequence number and object; the sequence       *)
(* number a reader took from the ring or a socket; the object or           *)
(* DecodeError it delivered; SHUTDOWN's total. MessageQueue's safety       *)
(* invariants (no frame dropped by a high-water mark, no loss, duplicate,  *)
(* reorder or reused sequence number, ClosedError only after everything)   *)
(* are checked in every replayed state. The trace is valid iff a behavior  *)
(* reaches step = Len(Trace): TLC then reports TraceNotDoneInv.            *)
(***************************************************************************)
EXTENDS MessageQueue

CONSTANT Trace

VARIABLE step

traceVars == <<vars, step>>

IsWriterEvent(e) == e.actor = "writer" /\ e.rd = -1
IsReaderEvent(e) == e.rd \in Readers

StepOf(e) ==
    CASE e.action = "WriterHandshake" -> IsWriterEvent(e) /\ WriterHandshake
      [] e.action = "WriterPublishChunk" -> IsWriterEvent(e) /\ WriterPublishChunk
      [] e.action = "WriterSendLocalFrame" -> IsWriterEvent(e) /\ WriterSendLocalFrame
      [] e.action = "WriterSendRemoteFrame" -> IsWriterEvent(e) /\ WriterSendRemoteFrame
      [] e.action = "WriterSendFails" -> IsWriterEvent(e) /\ WriterSendFails
      [] e.action = "WriterShutdown" -> IsWriterEvent(e) /\ WriterShutdown
      [] e.action = "ReaderSubscribe" -> IsReaderEvent(e) /\ ReaderSubscribe(e.rd)
      [] e.action = "ReaderAwaitReady" -> IsReaderEvent(e) /\ ReaderAwaitReady(e.rd)
      [] e.action = "ReaderTakeChunk" -> IsReaderEvent(e) /\ ReaderTakeChunk(e.rd)
      [] e.action = "ReaderRecvFrame" -> IsReaderEvent(e) /\ ReaderRecvFrame(e.rd)
      [] e.action = "ReaderTimeout" -> IsReaderEvent(e) /\ ReaderTimeout(e.rd)
      [] e.action = "ReaderResume" -> IsReaderEvent(e) /\ ReaderResume(e.rd)
      [] e.action = "ReaderStash" -> IsReaderEvent(e) /\ ReaderStash(e.rd)
      [] e.action = "ReaderSeeShutdown" -> IsReaderEvent(e) /\ ReaderSeeShutdown(e.rd)
      [] e.action = "ReaderClose" -> IsReaderEvent(e) /\ ReaderClose(e.rd)
      [] e.action = "RemoteRecvFrame" -> IsReaderEvent(e) /\ RemoteRecvFrame(e.rd)
      [] e.action = "RemoteSeeShutdown" -> IsReaderEvent(e) /\ RemoteSeeShutdown(e.rd)
      [] OTHER -> FALSE

\* The reader's delivery after the step is the event's object (or DecodeError).
Delivered(e) ==
    /\ Len(delivered'[e.rd]) = Len(delivered[e.rd]) + 1
    /\ LET d == delivered'[e.rd][Len(delivered'[e.rd])]
       IN  IF e.obj = -1 THEN d[2] = "error" ELSE d = <<e.obj, "ok">>

\* What the step moved agrees with the event.
Agree(e) ==
    CASE e.action = "WriterPublishChunk" -> pub'[Len(pub')] = <<e.kind, e.seq, e.obj>>
      [] e.action \in {"WriterSendLocalFrame", "WriterSendRemoteFrame", "WriterSendFails"} ->
            e.seq = nseq
      [] e.action = "WriterShutdown" -> e.seq = nseq - 1
      [] e.action = "ReaderTakeChunk" ->
            /\ pub[released[e.rd] + 1][1] = e.kind
            /\ pub[released[e.rd] + 1][2] = e.seq
            /\ IF e.kind = "inline" THEN Delivered(e) ELSE UNCHANGED delivered
      [] e.action = "ReaderRecvFrame" -> pending[e.rd] = e.seq /\ Delivered(e)
      [] e.action = "RemoteRecvFrame" -> rseq[e.rd] = e.seq /\ Delivered(e)
      [] e.action = "ReaderStash" -> Head(sockQ[e.rd])[2] = e.seq
      [] e.action \in {"ReaderTimeout", "ReaderResume"} -> pending[e.rd] = e.seq
      [] e.action \in {"ReaderSeeShutdown", "RemoteSeeShutdown", "ReaderClose"} ->
            shutTotal'[e.rd] = e.seq
      [] OTHER -> TRUE

TraceInit == Init /\ step = 0

TraceNext ==
    /\ step < Len(Trace)
    /\ StepOf(Trace[step + 1]) /\ Agree(Trace[step + 1])
    /\ step' = step + 1

-----------------------------------------------------------------------------
\* Why a trace is rejected: the first of these TLC reports violated.
NextEvent == Trace[step + 1]
Pending == step < Len(Trace)

\* The event is not the actor's next step (order, a guard, an actor).
ReplayStepInv == Pending => ENABLED StepOf(NextEvent)
\* ... it is, but what it moved differs (kind, sequence number, object, total).
ReplayAgreeInv == Pending => ENABLED (StepOf(NextEvent) /\ Agree(NextEvent))

\* Expected to be VIOLATED: its violation means the whole trace was replayed.
TraceNotDoneInv == Pending
=============================================================================
