-------------------------- MODULE TraceRingBuffer --------------------------
(***************************************************************************)
(* Trace validation: a run of the real ring is a behavior of RingBuffer.   *)
(*                                                                         *)
(* `Trace` is a sequence of step events recorded by a StepObserver on the  *)
(* real cursors (tests/test_trace_validation.py). That observer makes each *)
(* step atomic with respect to every other step (a lock from before_step   *)
(* to after_step), so the recorded order is a linearization. Each event:   *)
(*   actor   "writer" or "reader<k>";  rd: k for a reader, -1 the writer   *)
(*   action  the step name (src/verifiedring/steps.py): one event per load *)
(*           or store of a flag byte, failed poll loads included           *)
(*   chunk   the chunk the step acted on                                   *)
(*   reader  the read flag a WriterPollReadFlag loaded or a                *)
(*           WriterClearReadFlag cleared, else -1                          *)
(*   after   the chunk's flag bytes after the step: <<written, r0, ...>>   *)
(*                                                                         *)
(* TraceNext replays event step+1 with the action of the same name and     *)
(* requires the chunk and the resulting flag bytes to agree. The trace is  *)
(* valid iff some behavior reaches step = Len(Trace): the harness checks   *)
(* TraceNotDoneInv and expects TLC to report it violated.                  *)
(*                                                                         *)
(* One mapping is not one-to-one: the code reports WriterFillPayload (the  *)
(* caller's body) and then WriterAbort when the body raised, while the     *)
(* spec's WriterAbort replaces WriterFillPayload. A WriterFillPayload      *)
(* event whose writer's next event is WriterAbort is therefore a stutter.  *)
(***************************************************************************)
EXTENDS RingBuffer

CONSTANT Trace

VARIABLE step

traceVars == <<vars, step>>

NoWriterEvent == "none"

\* The action of the writer's first event after position k.
NextWriterAction(k) ==
    LET later == {j \in (k + 1) .. Len(Trace) : Trace[j].actor = "writer"}
    IN  IF later = {} THEN NoWriterEvent
        ELSE Trace[CHOOSE j \in later : \A i \in later : j <= i].action

\* The step's action, on the chunk the event names.
Replay(e) ==
    CASE e.action = "WriterPollWritten" -> e.chunk = windex /\ WriterPollWritten
      [] e.action = "WriterPollReadFlag" ->
            e.chunk = windex /\ e.reader = wflag /\ WriterPollReadFlag
      [] e.action = "WriterClearWritten" -> e.chunk = windex /\ WriterClearWritten
      [] e.action = "WriterFillPayload" ->
            /\ e.chunk = windex
            /\ IF NextWriterAction(step + 1) = "WriterAbort"
                 THEN wpc = "fill" /\ UNCHANGED vars
                 ELSE WriterFillPayload
      [] e.action = "WriterAbort" -> e.chunk = windex /\ WriterAbort
      [] e.action = "WriterClearReadFlag" ->
            e.chunk = windex /\ e.reader = wflag /\ WriterClearReadFlag
      [] e.action = "WriterPublish" -> e.chunk = windex /\ WriterPublish
      [] e.action = "ReaderPollReadFlag" ->
            e.chunk = rindex[e.rd] /\ ReaderPollReadFlag(e.rd)
      [] e.action = "ReaderPollWritten" ->
            e.chunk = rindex[e.rd] /\ ReaderPollWritten(e.rd)
      [] e.action = "ReaderReadPayload" ->
            e.chunk = rindex[e.rd] /\ ReaderReadPayload(e.rd)
      [] e.action = "ReaderRelease" -> e.chunk = rindex[e.rd] /\ ReaderRelease(e.rd)

\* The recorded flag bytes of the chunk agree with the spec's after the step.
FlagsAgree(e) ==
    /\ written'[e.chunk] = e.after[1]
    /\ \A i \in FlagIdx : readFlag'[e.chunk][i] = e.after[i + 2]

TraceInit == Init /\ step = 0

TraceNext ==
    /\ step < Len(Trace)
    /\ Replay(Trace[step + 1])
    /\ FlagsAgree(Trace[step + 1])
    /\ step' = step + 1

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

\* Expected to be VIOLATED: its violation means the whole trace was replayed.
TraceNotDoneInv == step < Len(Trace)
=============================================================================
