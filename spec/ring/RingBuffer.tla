----------------------------- MODULE RingBuffer -----------------------------
(***************************************************************************)
(* The shared-memory broadcast ring of vLLM's shm_broadcast.py, as         *)
(* implemented in src/verifiedring/ring.py and cursors.py, under           *)
(* sequentially consistent memory.  One writer, NReaders readers,          *)
(* NChunks chunks.                                                         *)
(*                                                                         *)
(* Shared segment, per chunk c:                                            *)
(*   written[c]      the `written` byte                                    *)
(*   readFlag[c][i]  one `read` byte per local reader index i              *)
(*   payload[c]      the chunk's data (a message number, Empty or Torn)    *)
(*                                                                         *)
(* Every action is ONE shared-memory access: one load or one store of a    *)
(* flag byte, or the caller's payload loads/stores as a whole.  Each       *)
(* carries the step name used verbatim in the code (`# spec: Name`), in    *)
(* the hypothesis rules of tests/test_ring_stateful.py (RingMachine) and   *)
(* in trace events (src/verifiedring/steps.py).                            *)
(*                                                                         *)
(* A poll is two or more loads, each its own step.  The reader loads its   *)
(* own read flag (ReaderPollReadFlag), then `written` (ReaderPollWritten). *)
(* The writer loads `written` (WriterPollWritten), then, if it was 1, the  *)
(* read flags one at a time, 0..NReaders-1 (WriterPollReadFlag).  A poll   *)
(* whose first load fails is a stuttering step; one that fails on a later  *)
(* load goes back to the first load.  A hang therefore is NOT a deadlock:  *)
(* it is caught by the liveness properties below.                          *)
(*                                                                         *)
(* This module is the protocol only; bounds live in MC*.tla / *.cfg and    *)
(* the broken variants in mutants/.                                        *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    NReaders,         \* n_reader: number of local readers
    NChunks,          \* max_chunks
    MaxMsgs,          \* bound: number of messages the writer sends
    MaxAborts,        \* bound: writes whose caller raises (WriterAbort)
    MaxReaderRaises,  \* bound: reads whose caller raises inside the read
    FlagIndex(_)      \* the read-flag index reader r's code uses
                      \* (correct code: its local position r)

ASSUME /\ NReaders \in Nat \ {0}
       /\ NChunks \in Nat \ {0}
       /\ MaxMsgs \in Nat \ {0}
       /\ MaxAborts \in Nat
       /\ MaxReaderRaises \in Nat

Readers == 0 .. NReaders - 1       \* local reader positions
FlagIdx == 0 .. NReaders - 1       \* read-flag bytes per chunk; byte i is reader i's
Chunks  == 0 .. NChunks - 1
Msgs    == 1 .. MaxMsgs            \* message k carries payload k
Empty   == 0                       \* payload of a never-written chunk
Torn    == -1                      \* payload being written / left partial
Succ(c) == (c + 1) % NChunks
LastFlag == NReaders - 1

VARIABLES
    \* shared memory
    written, readFlag, payload,
    \* writer (process-local)
    wpc, windex, wflag, sent, aborts,
    \* readers (process-local)
    rpc, rindex, delivered, raises

shared  == <<written, readFlag, payload>>
wvars   == <<wpc, windex, wflag, sent, aborts>>
rvars   == <<rpc, rindex, delivered, raises>>
vars    == <<shared, wvars, rvars>>

\* wpc: "poll" next loads written; "pollflag" next loads read flag wflag;
\* "flags" next clears read flag wflag.  wflag is 0 in every other state.
\* "held": a with-block's exit was cut and nothing lets its chunk go (only the
\* mutant's ExitCutLetsGo = FALSE reaches it).
WriterPCs == {"poll", "pollflag", "clear", "fill", "flags", "publish", "held", "done"}
\* rpc: "poll" next makes the poll's first load, "poll2" its second load.
ReaderPCs == {"poll", "poll2", "read", "release", "raised", "held", "done", "fault"}

TypeOK ==
    /\ written  \in [Chunks -> {0, 1}]
    /\ readFlag \in [Chunks -> [FlagIdx -> {0, 1}]]
    /\ payload  \in [Chunks -> Msgs \cup {Empty, Torn}]
    /\ wpc \in WriterPCs
    /\ windex \in Chunks
    /\ wflag \in FlagIdx
    /\ sent \in 0 .. MaxMsgs
    /\ aborts \in 0 .. MaxAborts
    /\ rpc \in [Readers -> ReaderPCs]
    /\ rindex \in [Readers -> Chunks]
    /\ delivered \in [Readers -> Seq(Msgs \cup {Empty, Torn})]
    /\ raises \in 0 .. MaxReaderRaises

Init ==
    /\ written  = [c \in Chunks |-> 0]
    /\ readFlag = [c \in Chunks |-> [i \in FlagIdx |-> 0]]
    /\ payload  = [c \in Chunks |-> Empty]
    /\ wpc = "poll" /\ windex = 0 /\ wflag = 0 /\ sent = 0 /\ aborts = 0
    /\ rpc = [r \in Readers |-> "poll"]
    /\ rindex = [r \in Readers |-> 0]
    /\ delivered = [r \in Readers |-> <<>>]
    /\ raises = 0

(* The caller's payload stores on chunk c are in progress: a load of the   *)
(* payload now observes a mix of old and new bytes.                        *)
WriterFilling(c) == wpc = "fill" /\ windex = c

-----------------------------------------------------------------------------
(*************************************** writer ****************************)

\* cursors.py: WriterCursor._poll_free (WriterPollWritten): load written[windex].
\* 0: the chunk is free (then FW1).  1: go on to the read flags.
WriterPollWritten ==
    /\ wpc = "poll"
    /\ wpc' = IF written[windex] = 0 THEN "clear" ELSE "pollflag"
    /\ UNCHANGED <<shared, windex, wflag, sent, aborts, rvars>>

\* cursors.py: WriterCursor._poll_free (WriterPollReadFlag): load read flag
\* wflag of chunk windex, flags in order 0..NReaders-1.  A 0 fails the poll
\* (the next poll starts again at WriterPollWritten); the last flag 1 means
\* the chunk is free (then FW1).
WriterPollReadFlag ==
    /\ wpc = "pollflag"
    /\ IF readFlag[windex][wflag] = 0
         THEN wpc' = "poll" /\ wflag' = 0
       ELSE IF wflag = LastFlag
         THEN wpc' = "clear" /\ wflag' = 0
         ELSE wpc' = "pollflag" /\ wflag' = wflag + 1
    /\ UNCHANGED <<shared, windex, sent, aborts, rvars>>

\* cursors.py: WriterCursor.__enter__ (WriterClearWritten); then FW2.
WriterClearWritten ==
    /\ wpc = "clear"
    /\ written' = [written EXCEPT ![windex] = 0]
    /\ wpc' = "fill"
    /\ UNCHANGED <<readFlag, payload, windex, wflag, sent, aborts, rvars>>

\* cursors.py: WriterCursor.__enter__ yields the chunk; the caller's stores
\* (WriterFillPayload) complete normally; then FW3 in WriterCursor.__exit__.
WriterFillPayload ==
    /\ wpc = "fill"
    /\ payload' = [payload EXCEPT ![windex] = sent + 1]
    /\ wpc' = "flags"
    /\ UNCHANGED <<written, readFlag, windex, wflag, sent, aborts, rvars>>

\* cursors.py: WriterCursor.__exit__ with an exception (WriterAbort).  The
\* caller raised part-way through its stores ("fill"), or an asynchronous
\* exception (KeyboardInterrupt) landed inside __exit__ before the publish
\* store: where CPython delivers one, at the return of the FW3 or FW4 fence
\* call or at the loop's back edge between two read-flag clears ("flags",
\* "publish"). Either way the chunk holds a partial payload, stays
\* unpublished (written = 0), the read flags already cleared stay cleared,
\* windex does not advance, the message is not sent; the next message reuses
\* this chunk.
WriterAbort ==
    /\ wpc \in {"fill", "flags", "publish"}
    /\ aborts < MaxAborts
    /\ payload' = [payload EXCEPT ![windex] = Torn]
    /\ aborts' = aborts + 1
    /\ wpc' = "poll"
    /\ wflag' = 0
    /\ UNCHANGED <<written, readFlag, windex, sent, rvars>>

\* cursors.py: WriterCursor.__exit__ (WriterClearReadFlag): store read flag
\* wflag = 0, one single-byte store per reader, in order 0..NReaders-1;
\* then FW4.
WriterClearReadFlag ==
    /\ wpc = "flags"
    /\ readFlag' = [readFlag EXCEPT ![windex][wflag] = 0]
    /\ IF wflag = LastFlag
         THEN wpc' = "publish" /\ wflag' = 0
         ELSE wpc' = "flags" /\ wflag' = wflag + 1
    /\ UNCHANGED <<written, payload, windex, sent, aborts, rvars>>

\* cursors.py: WriterCursor.__exit__ (WriterPublish): store written = 1, advance.
WriterPublish ==
    /\ wpc = "publish"
    /\ written' = [written EXCEPT ![windex] = 1]
    /\ windex' = Succ(windex)
    /\ sent' = sent + 1
    /\ wpc' = IF sent + 1 = MaxMsgs THEN "done" ELSE "poll"
    /\ UNCHANGED <<readFlag, payload, wflag, aborts, rvars>>

\* leases.py: WriteLease.__del__ (WriterExitCut).  An asynchronous exception
\* landed at the entry of the with-block's __exit__, after the body ("flags",
\* before the first clear): CPython checks for pending signals as a function
\* starts, so no exit code ran.  The lease, the with-statement's own object,
\* dies holding the chunk and lets it go as WriterAbort does: no store, the
\* index stays, the message is not sent; its complete bytes are no sent
\* message (Torn, for the invariants).  Bounded with the aborts.  With
\* ExitCutLetsGo = FALSE (the cursor as its own context manager, the code
\* before the leases) the chunk stays held.
ExitCutLetsGo == TRUE
WriterExitCut ==
    /\ wpc = "flags" /\ wflag = 0
    /\ aborts < MaxAborts
    /\ payload' = [payload EXCEPT ![windex] = Torn]
    /\ aborts' = aborts + 1
    /\ wpc' = IF ExitCutLetsGo THEN "poll" ELSE "held"
    /\ UNCHANGED <<written, readFlag, windex, wflag, sent, rvars>>

-----------------------------------------------------------------------------
(*************************************** readers ***************************)

\* cursors.py: ReaderCursor.poll (ReaderPollReadFlag): load the reader's
\* own read flag of chunk rindex[r].  1: the poll fails (a stutter).  0: FR0,
\* then ReaderPollWritten.  An index outside the flag bytes raises IndexError
\* in the code (the reader process dies): modeled as rpc = "fault".
ReaderPollReadFlag(r) ==
    LET c == rindex[r] IN
    /\ rpc[r] = "poll"
    /\ IF FlagIndex(r) \notin FlagIdx
         THEN rpc' = [rpc EXCEPT ![r] = "fault"]
       ELSE IF readFlag[c][FlagIndex(r)] = 0
         THEN rpc' = [rpc EXCEPT ![r] = "poll2"]
         ELSE UNCHANGED rpc                      \* the poll fails: same state
    /\ UNCHANGED <<shared, wvars, rindex, delivered, raises>>

\* cursors.py: ReaderCursor.poll (ReaderPollWritten): load written of
\* chunk rindex[r].  0: the poll fails; the next poll starts again at
\* ReaderPollReadFlag.  1: FR1, then the caller reads.
ReaderPollWritten(r) ==
    LET c == rindex[r] IN
    /\ rpc[r] = "poll2"
    /\ rpc' = [rpc EXCEPT ![r] = IF written[c] = 1 THEN "read" ELSE "poll"]
    /\ UNCHANGED <<shared, wvars, rindex, delivered, raises>>

\* cursors.py: ReaderCursor.__enter__ yields the chunk; the caller's loads
\* (ReaderReadPayload).  The caller may raise after loading (bounded).
ReaderReadPayload(r) ==
    LET c == rindex[r]
        v == IF WriterFilling(c) THEN Torn ELSE payload[c]
    IN
    /\ rpc[r] = "read"
    /\ delivered' = [delivered EXCEPT ![r] = Append(@, v)]
    /\ \/ /\ rpc' = [rpc EXCEPT ![r] = "release"]
          /\ UNCHANGED raises
       \/ /\ raises < MaxReaderRaises
          /\ raises' = raises + 1
          /\ rpc' = [rpc EXCEPT ![r] = "raised"]
    /\ UNCHANGED <<shared, wvars, rindex>>

\* cursors.py: ReaderCursor.__exit__ (ReaderRelease), after FR2; runs also when
\* the caller raised.
Released(r) ==     \* the release store, and the advance to the next chunk
    LET c == rindex[r] IN
    /\ readFlag' = [readFlag EXCEPT ![c][FlagIndex(r)] = 1]
    /\ rindex' = [rindex EXCEPT ![r] = Succ(c)]
    /\ rpc' = [rpc EXCEPT ![r] = IF Len(delivered[r]) >= MaxMsgs
                                   THEN "done" ELSE "poll"]

ReaderRelease(r) ==
    /\ rpc[r] \in {"release", "raised"}
    /\ Released(r)
    /\ raises' = raises
    /\ UNCHANGED <<written, payload, wvars, delivered>>

\* leases.py: ReadLease.__del__ (ReaderExitCut).  The with-block's __exit__
\* was cut at its entry (after the body, which may have raised); the lease
\* dies holding the chunk and releases it: ReaderRelease's store and advance.
\* Bounded with the reader raises (the caller sees an exception).  With
\* ExitCutLetsGo = FALSE the chunk stays taken and unreleased.
ReaderExitCut(r) ==
    /\ rpc[r] \in {"release", "raised"}
    /\ raises < MaxReaderRaises
    /\ raises' = raises + 1
    /\ IF ExitCutLetsGo
         THEN Released(r)
         ELSE /\ rpc' = [rpc EXCEPT ![r] = "held"]
              /\ UNCHANGED <<readFlag, rindex>>
    /\ UNCHANGED <<written, payload, wvars, delivered>>

-----------------------------------------------------------------------------
AllDone == wpc = "done" /\ \A r \in Readers : rpc[r] = "done"

\* Bounded run finished: stutter explicitly so deadlock checking stays on.
Done == AllDone /\ UNCHANGED vars

Writer == \/ WriterPollWritten \/ WriterPollReadFlag \/ WriterClearWritten
          \/ WriterFillPayload \/ WriterAbort \/ WriterClearReadFlag
          \/ WriterPublish \/ WriterExitCut

Reader(r) == \/ ReaderPollReadFlag(r) \/ ReaderPollWritten(r)
             \/ ReaderReadPayload(r) \/ ReaderRelease(r) \/ ReaderExitCut(r)

Next == Writer \/ (\E r \in Readers : Reader(r)) \/ Done

Fairness == WF_vars(Writer) /\ \A r \in Readers : WF_vars(Reader(r))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(*************************************** safety ****************************)

TypeOKInv == TypeOK

\* No reader ever hands its caller a payload the writer was storing.
NoTornReadInv ==
    \A r \in Readers : \A k \in 1 .. Len(delivered[r]) : delivered[r][k] # Torn

\* Each reader's delivered sequence is a prefix of the message sequence
\* <<1, 2, 3, ...>>: in order, none skipped, none duplicated (and not torn).
DeliveredPrefixInv ==
    \A r \in Readers : \A k \in 1 .. Len(delivered[r]) : delivered[r][k] = k

\* ... and of the SENT sequence <<1, ..., sent>>: a reader only consumes
\* messages already published by WriterPublish.
PublishedBeforeReadInv ==
    \A r \in Readers : Len(delivered[r]) <= sent

\* The writer never starts overwriting a chunk whose message some reader
\* has not yet read (from the successful poll until the payload is stored).
NoOverwriteUnreadInv ==
    wpc \in {"clear", "fill"} /\ payload[windex] \in Msgs =>
        \A r \in Readers : \E k \in 1 .. Len(delivered[r]) :
            delivered[r][k] = payload[windex]

\* Every flag access is inside the chunk's read-flag bytes.
FlagInBoundsInv == \A r \in Readers : rpc[r] # "fault"

\* The writer's poll is N + 1 separate loads, yet as good as one snapshot:
\* read flags only go 0 -> 1 while the writer polls (only readers store to
\* them then, and only 1), so a flag the poll has seen as 1 is still 1, and
\* a chunk the poll found free through its flags has ALL flags 1 when the
\* writer claims it.
PollFlagsStableInv ==
    /\ wpc = "pollflag" => \A i \in 0 .. wflag - 1 : readFlag[windex][i] = 1
    /\ wpc = "clear" /\ written[windex] = 1 =>
           \A i \in FlagIdx : readFlag[windex][i] = 1

\* Read flag i of a chunk is reader i's acknowledgement: when it is 1 and
\* the chunk holds a message, reader i has delivered that message -- except
\* between the writer's WriterFillPayload and its clear of that flag.
FlagAwaitingClear(c, i) == wpc = "flags" /\ windex = c /\ i >= wflag
ReadFlagMeansReadInv ==
    \A c \in Chunks, i \in FlagIdx :
        readFlag[c][i] = 1 /\ payload[c] \in Msgs /\ ~FlagAwaitingClear(c, i) =>
            \E k \in 1 .. Len(delivered[i]) : delivered[i][k] = payload[c]

(*************************************** liveness **************************)

\* The bounded run completes: nobody spins forever.
AllDoneProp == <>AllDone

\* Every sent message is eventually read by every reader: a reader never
\* stays behind the writer forever.
EveryMessageReadProp ==
    \A r \in Readers : []<>(Len(delivered[r]) >= sent)

\* The writer is never blocked forever (readers keep reading, so a chunk it
\* waits for is eventually released): every polling phase ends.
WriterPolling == wpc \in {"poll", "pollflag"}
WriterProgressProp == WriterPolling ~> ~WriterPolling
=============================================================================
