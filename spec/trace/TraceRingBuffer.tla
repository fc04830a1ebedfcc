-------------------------- MODULE TraceRingBuffer --------------------------
(***************************************************************************)
(* Trace validation: a run of the real ring is a behavior of RingBuffer.   *)
(*                                                                         *)
(* `Trace` is a sequence of step events recorded by                        *)
(* verifiedring.testing.trace.TraceRecorder, a StepObserver installed on   *)
(* the real cursors of a writer and its readers: separate processes (or    *)
(* threads).  Every traced step holds one lock shared by all of them from  *)
(* before_step to after_step, and appends its event under that lock, so    *)
(* the recorded order is the order in which the steps happened.  Each      *)
(* event:                                                                  *)
(*   actor   "writer" or "reader<k>";  rd: k for a reader, -1 the writer   *)
(*   action  the step name (src/verifiedring/steps.py): one event per load *)
(*           or store of a flag byte, failed poll loads included           *)
(*   chunk   the chunk the step acted on                                   *)
(*   reader  the read flag a WriterPollReadFlag loaded or a                *)
(*           WriterClearReadFlag cleared, else -1                          *)
(*   after   the chunk's flag bytes after the step: <<written, r0, ...>>   *)
(*   seq     the payload's sequence number: for WriterFillPayload what the *)
(*           chunk holds after the writer's stores, for ReaderReadPayload  *)
(*           what the reader's caller loaded; NoSeq for every other step   *)
(*   abort   TRUE for a WriterFillPayload whose caller raised (the code    *)
(*           reports WriterFillPayload, then WriterAbort)                  *)
(*   raised  TRUE for a ReaderReadPayload whose caller raised after its    *)
(*           loads (the harness says so): the spec's raise branch          *)
(*                                                                         *)
(* TraceNext replays event step+1 with the action of the same name and     *)
(* requires, in this order: the step is that actor's next step in the spec *)
(* (a failed poll load is a step too: RingBuffer sends a failed            *)
(* ReaderPollWritten / WriterPollReadFlag back to the poll's first load,   *)
(* a failed first load is a stutter), the chunk is the actor's current     *)
(* chunk, the chunk's flag bytes after the step agree, and the payload     *)
(* agrees: the writer fills message number `sent` (0-based, the spec's     *)
(* message sent + 1), a reader loads exactly the number the writer last    *)
(* filled into that chunk (`filled`, the recorded bytes, not the spec's    *)
(* abstract payload).  Each requirement has an invariant that holds while  *)
(* the next event can pass it (ReplayStepInv ... ReplaySeqInv): the first  *)
(* one TLC reports names why the trace is rejected, its last state the     *)
(* event (`step` + 1).  RingBuffer's safety invariants are checked in      *)
(* every replayed state.  The trace is valid iff a behavior reaches        *)
(* step = Len(Trace): TLC then reports TraceNotDoneInv (listed last).      *)
(*                                                                         *)
(* The recorder folds a failed poll that exactly repeats the same actor's  *)
(* previous failed poll with no event in between: a failed poll returns    *)
(* the spec to the state before its first load, so the repeat would replay *)
(* from and to that same state.                                            *)
(*                                                                         *)
(* One mapping is not one-to-one: the spec's WriterAbort replaces          *)
(* WriterFillPayload, so a WriterFillPayload event with abort = TRUE is a  *)
(* stutter of the spec's variables.                                        *)
(***************************************************************************)
EXTENDS RingBuffer

CONSTANT Trace

VARIABLES step, filled

traceVars == <<vars, step, filled>>

NoSeq  == -2   \* an event that moves no payload; a chunk no traced fill wrote
EndSeq == -1   \* stress ring's END frame: 2**64 - 1 read as a signed number

IsWriterEvent(e) == e.actor = "writer" /\ e.rd = -1
IsReaderEvent(e) == e.rd \in Readers

\* The actor's next step is the step the event names.
StepOf(e) ==
    CASE e.action = "WriterPollWritten" -> IsWriterEvent(e) /\ WriterPollWritten
      [] e.action = "WriterPollReadFlag" ->
            IsWriterEvent(e) /\ e.reader = wflag /\ WriterPollReadFlag
      [] e.action = "WriterClearWritten" -> IsWriterEvent(e) /\ WriterClearWritten
      [] e.action = "WriterFillPayload" ->
            /\ IsWriterEvent(e)
            /\ IF e.abort THEN wpc = "fill" /\ UNCHANGED vars ELSE WriterFillPayload
      [] e.action = "WriterAbort" -> IsWriterEvent(e) /\ WriterAbort
      [] e.action = "WriterClearReadFlag" ->
            IsWriterEvent(e) /\ e.reader = wflag /\ WriterClearReadFlag
      [] e.action = "WriterPublish" -> IsWriterEvent(e) /\ WriterPublish
      [] e.action = "WriterExitCut" -> IsWriterEvent(e) /\ WriterExitCut
      [] e.action = "ReaderPollReadFlag" -> IsReaderEvent(e) /\ ReaderPollReadFlag(e.rd)
      [] e.action = "ReaderPollWritten" -> IsReaderEvent(e) /\ ReaderPollWritten(e.rd)
      [] e.action = "ReaderReadPayload" ->
            /\ IsReaderEvent(e)
            /\ ReaderReadPayload(e.rd)
            /\ rpc'[e.rd] = IF e.raised THEN "raised" ELSE "release"
      [] e.action = "ReaderRelease" -> IsReaderEvent(e) /\ ReaderRelease(e.rd)
      [] e.action = "ReaderExitCut" -> IsReaderEvent(e) /\ ReaderExitCut(e.rd)
      [] OTHER -> FALSE

\* ... on the actor's current chunk (before the step).
ChunkOf(e) == IF e.rd \in Readers THEN e.chunk = rindex[e.rd] ELSE e.chunk = windex

\* The recorded flag bytes of the chunk agree with the spec's after the step.
FlagsAgree(e) ==
    /\ Len(e.after) = NReaders + 1
    /\ written'[e.chunk] = e.after[1]
    /\ \A i \in FlagIdx : readFlag'[e.chunk][i] = e.after[i + 2]

\* The writer stores message number `sent` (or stress ring's END frame as
\* the last message); a reader loads what the writer last filled.
SeqAgree(e) ==
    CASE e.action = "WriterFillPayload" /\ ~e.abort ->
            e.seq = sent \/ (e.seq = EndSeq /\ sent + 1 = MaxMsgs)
      [] e.action = "ReaderReadPayload" -> e.seq = filled[e.chunk]
      [] OTHER -> TRUE

FilledNext(e) ==
    filled' = IF e.action = "WriterFillPayload"
                THEN [filled EXCEPT ![e.chunk] = e.seq] ELSE filled

ReplayEvent(e) ==
    StepOf(e) /\ ChunkOf(e) /\ FlagsAgree(e) /\ SeqAgree(e) /\ FilledNext(e)

TraceInit == Init /\ step = 0 /\ filled = [c \in Chunks |-> NoSeq]

TraceNext ==
    /\ step < Len(Trace)
    /\ ReplayEvent(Trace[step + 1])
    /\ step' = step + 1

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

-----------------------------------------------------------------------------
\* Why a trace is rejected: the first of these TLC reports violated.
NextEvent == Trace[step + 1]
Pending == step < Len(Trace)

\* The event is not the actor's next step (order, a poll outcome, an actor).
ReplayStepInv == Pending => ENABLED StepOf(NextEvent)
\* ... it is, but on another chunk.
ReplayChunkInv == Pending => ENABLED (StepOf(NextEvent) /\ ChunkOf(NextEvent))
\* ... the flag bytes after it differ from the spec's.
ReplayFlagsInv ==
    Pending => ENABLED (StepOf(NextEvent) /\ ChunkOf(NextEvent) /\ FlagsAgree(NextEvent))
\* ... the payload sequence number is not the one filled / due.
ReplaySeqInv ==
    Pending => ENABLED (StepOf(NextEvent) /\ ChunkOf(NextEvent)
                        /\ FlagsAgree(NextEvent) /\ SeqAgree(NextEvent))

\* Expected to be VIOLATED: its violation means the whole trace was replayed.
TraceNotDoneInv == Pending
=============================================================================
