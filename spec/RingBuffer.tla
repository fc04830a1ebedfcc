----------------------------- MODULE RingBuffer -----------------------------
(***************************************************************************)
(* The shared-memory broadcast ring of vLLM's shm_broadcast.py, as         *)
(* implemented in src/verifiedring/ring.py, under sequentially consistent  *)
(* memory.  One writer, NReaders readers, NChunks chunks.                  *)
(*                                                                         *)
(* Shared segment, per chunk c:                                            *)
(*   written[c]      the `written` byte                                    *)
(*   readFlag[c][i]  one `read` byte per local reader index i              *)
(*   payload[c]      the chunk's data (a message number, Empty or Torn)    *)
(*                                                                         *)
(* Every action is ONE shared-memory access (one load group or one store)  *)
(* and carries the step name used verbatim in the code (`# spec: Name`),   *)
(* in the hypothesis rules of tests/test_ring_stateful.py (RingMachine)    *)
(* and in trace events (src/verifiedring/steps.py).                        *)
(*                                                                         *)
(* A spin (poll that finds the chunk not ready) is a real step that leaves *)
(* every variable unchanged, i.e. a stuttering step.  A hang therefore is  *)
(* NOT a deadlock: it is caught by the liveness properties below.          *)
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
Slots   == 0 .. NReaders - 1       \* read-flag bytes per chunk
Chunks  == 0 .. NChunks - 1
Msgs    == 1 .. MaxMsgs            \* message k carries payload k
Empty   == 0                       \* payload of a never-written chunk
Torn    == -1                      \* payload being written / left partial
Succ(c) == (c + 1) % NChunks

VARIABLES
    \* shared memory
    written, readFlag, payload,
    \* writer (process-local)
    wpc, windex, toClear, sent, aborts,
    \* readers (process-local)
    rpc, rindex, delivered, raises

shared  == <<written, readFlag, payload>>
wvars   == <<wpc, windex, toClear, sent, aborts>>
rvars   == <<rpc, rindex, delivered, raises>>
vars    == <<shared, wvars, rvars>>

WriterPCs == {"poll", "clear", "fill", "flags", "publish", "done"}
ReaderPCs == {"poll", "read", "release", "raised", "done", "fault"}

TypeOK ==
    /\ written  \in [Chunks -> {0, 1}]
    /\ readFlag \in [Chunks -> [Slots -> {0, 1}]]
    /\ payload  \in [Chunks -> Msgs \cup {Empty, Torn}]
    /\ wpc \in WriterPCs
    /\ windex \in Chunks
    /\ toClear \subseteq Slots
    /\ sent \in 0 .. MaxMsgs
    /\ aborts \in 0 .. MaxAborts
    /\ rpc \in [Readers -> ReaderPCs]
    /\ rindex \in [Readers -> Chunks]
    /\ delivered \in [Readers -> Seq(Msgs \cup {Empty, Torn})]
    /\ raises \in 0 .. MaxReaderRaises

Init ==
    /\ written  = [c \in Chunks |-> 0]
    /\ readFlag = [c \in Chunks |-> [i \in Slots |-> 0]]
    /\ payload  = [c \in Chunks |-> Empty]
    /\ wpc = "poll" /\ windex = 0 /\ toClear = {} /\ sent = 0 /\ aborts = 0
    /\ rpc = [r \in Readers |-> "poll"]
    /\ rindex = [r \in Readers |-> 0]
    /\ delivered = [r \in Readers |-> <<>>]
    /\ raises = 0

(* The writer may reuse chunk c: nobody has published into it, or every    *)
(* reader has acknowledged it.                                             *)
ChunkFree(c) == written[c] = 0 \/ \A i \in Slots : readFlag[c][i] = 1

(* The caller's payload stores on chunk c are in progress: a load of the   *)
(* payload now observes a mix of old and new bytes.                        *)
WriterFilling(c) == wpc = "fill" /\ windex = c

-----------------------------------------------------------------------------
(*************************************** writer ****************************)

\* ring.py: WriterCursor._poll_free, called from WriterCursor.__enter__ (WriterPoll)
\* One load of written[windex] and of all its read flags; then FW1.
WriterPoll ==
    /\ wpc = "poll"
    /\ IF ChunkFree(windex)
         THEN wpc' = "clear"
         ELSE UNCHANGED wpc                      \* spin: stays, same state
    /\ UNCHANGED <<shared, windex, toClear, sent, aborts, rvars>>

\* ring.py: WriterCursor.__enter__ (WriterClearWritten); then FW2.
WriterClearWritten ==
    /\ wpc = "clear"
    /\ written' = [written EXCEPT ![windex] = 0]
    /\ wpc' = "fill"
    /\ UNCHANGED <<readFlag, payload, windex, toClear, sent, aborts, rvars>>

\* ring.py: WriterCursor.__enter__ yields the chunk; the caller's stores
\* (WriterFillPayload) complete normally; then FW3 in WriterCursor.__exit__.
WriterFillPayload ==
    /\ wpc = "fill"
    /\ payload' = [payload EXCEPT ![windex] = sent + 1]
    /\ toClear' = Slots
    /\ wpc' = "flags"
    /\ UNCHANGED <<written, readFlag, windex, sent, aborts, rvars>>

\* ring.py: WriterCursor.__exit__ with an exception (WriterAbort).  The
\* caller raised part-way through its stores: the chunk holds a partial
\* payload, stays unpublished, no flag is touched, windex does not advance,
\* the message is not sent; the next message reuses this chunk.
WriterAbort ==
    /\ wpc = "fill"
    /\ aborts < MaxAborts
    /\ payload' = [payload EXCEPT ![windex] = Torn]
    /\ aborts' = aborts + 1
    /\ wpc' = "poll"
    /\ UNCHANGED <<written, readFlag, windex, toClear, sent, rvars>>

\* ring.py: WriterCursor.__exit__ (WriterClearReadFlag, once per reader, any
\* order -- covers a memcpy of zeros over the flag bytes); then FW4.
WriterClearReadFlag ==
    /\ wpc = "flags"
    /\ \E i \in toClear :
         /\ readFlag' = [readFlag EXCEPT ![windex][i] = 0]
         /\ toClear' = toClear \ {i}
    /\ wpc' = IF toClear' = {} THEN "publish" ELSE "flags"
    /\ UNCHANGED <<written, payload, windex, sent, aborts, rvars>>

\* ring.py: WriterCursor.__exit__ (WriterPublish): store written = 1, advance.
WriterPublish ==
    /\ wpc = "publish"
    /\ written' = [written EXCEPT ![windex] = 1]
    /\ windex' = Succ(windex)
    /\ sent' = sent + 1
    /\ wpc' = IF sent + 1 = MaxMsgs THEN "done" ELSE "poll"
    /\ UNCHANGED <<readFlag, payload, toClear, aborts, rvars>>

-----------------------------------------------------------------------------
(*************************************** readers ***************************)

\* ring.py: ReaderCursor._poll_ready, called from ReaderCursor.__enter__
\* (ReaderPoll): one load of written[rindex[r]] and of the reader's own flag;
\* then FR1.  An index outside the flag bytes raises IndexError in the code
\* (the reader process dies): modeled as rpc = "fault".
ReaderPoll(r) ==
    LET c == rindex[r] IN
    /\ rpc[r] = "poll"
    /\ IF FlagIndex(r) \notin Slots
         THEN rpc' = [rpc EXCEPT ![r] = "fault"]
       ELSE IF written[c] = 1 /\ readFlag[c][FlagIndex(r)] = 0
         THEN rpc' = [rpc EXCEPT ![r] = "read"]
         ELSE UNCHANGED rpc                      \* spin: stays, same state
    /\ UNCHANGED <<shared, wvars, rindex, delivered, raises>>

\* ring.py: ReaderCursor.__enter__ yields the chunk; the caller's loads
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

\* ring.py: ReaderCursor.__exit__ (ReaderRelease), after FR2; runs also when
\* the caller raised.
ReaderRelease(r) ==
    LET c == rindex[r] IN
    /\ rpc[r] \in {"release", "raised"}
    /\ readFlag' = [readFlag EXCEPT ![c][FlagIndex(r)] = 1]
    /\ rindex' = [rindex EXCEPT ![r] = Succ(c)]
    /\ rpc' = [rpc EXCEPT ![r] = IF Len(delivered[r]) >= MaxMsgs
                                   THEN "done" ELSE "poll"]
    /\ UNCHANGED <<written, payload, wvars, delivered, raises>>

-----------------------------------------------------------------------------
AllDone == wpc = "done" /\ \A r \in Readers : rpc[r] = "done"

\* Bounded run finished: stutter explicitly so deadlock checking stays on.
Done == AllDone /\ UNCHANGED vars

Writer == \/ WriterPoll \/ WriterClearWritten \/ WriterFillPayload
          \/ WriterAbort \/ WriterClearReadFlag \/ WriterPublish

Reader(r) == ReaderPoll(r) \/ ReaderReadPayload(r) \/ ReaderRelease(r)

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
\* has not yet read (from WriterPoll's success until the payload is stored).
NoOverwriteUnreadInv ==
    wpc \in {"clear", "fill"} /\ payload[windex] \in Msgs =>
        \A r \in Readers : \E k \in 1 .. Len(delivered[r]) :
            delivered[r][k] = payload[windex]

\* Every flag access is inside the chunk's read-flag bytes.
FlagInBoundsInv == \A r \in Readers : rpc[r] # "fault"

(*************************************** liveness **************************)

\* The bounded run completes: nobody spins forever.
AllDoneProp == <>AllDone

\* Every sent message is eventually read by every reader: a reader never
\* stays behind the writer forever.
EveryMessageReadProp ==
    \A r \in Readers : []<>(Len(delivered[r]) >= sent)

\* The writer is never blocked forever (readers keep reading, so a chunk it
\* waits for is eventually released): every WriterPoll spin ends.
WriterProgressProp == (wpc = "poll") ~> (wpc # "poll")
=============================================================================
