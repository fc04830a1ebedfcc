--------------------------- MODULE RingBufferRelaxed ---------------------------
(***************************************************************************)
(* The ring protocol of RingBuffer.tla under a RELAXED memory model, to    *)
(* show which of the fences in src/verifiedring/ordering.py are needed.    *)
(*                                                                         *)
(* Memory model (an ARM/POWER-like abstraction, non-speculative stores):   *)
(*  - store->store and store->load reordering: every store goes into the   *)
(*    issuing process's store buffer; pending stores commit to memory one  *)
(*    at a time in ANY order (Commit steps).  A process's own loads see    *)
(*    its pending stores (forwarding); other processes see memory only.    *)
(*  - load->load reordering (reader): without FR1 the reader's payload     *)
(*    loads may be satisfied before its poll loads (ReaderPrefetch), and   *)
(*    the prefetched value is what its caller gets.                        *)
(*  - load->store reordering (reader): without FR2 the reader's release    *)
(*    store may be issued (and commit) before its payload loads.           *)
(*  - A fence waits until the process's store buffer is empty and forbids *)
(*    the reorderings above across it.                                     *)
(*  - Stores are never speculative: a store after WriterPoll's spin loop   *)
(*    cannot become visible before the loads that ended the loop.  So FW1  *)
(*    only drains the previous message's publish store here.               *)
(*                                                                         *)
(* The payload of a chunk is two words (lo, hi) stored by two separate     *)
(* stores, so a torn read is a delivered pair with lo # hi.                *)
(*                                                                         *)
(* Constants Fences (a subset of AllFences) and ClearWritten select the    *)
(* variant: the full protocol is Fences = AllFences, ClearWritten = TRUE.  *)
(* Aborts and reader raises are not modeled here (RingBuffer.tla covers    *)
(* them under SC; they add no new memory orderings).                       *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS NReaders, NChunks, MaxMsgs, Fences, ClearWritten

AllFences == {"FW1", "FW2", "FW3", "FW4", "FR1", "FR2"}
ASSUME Fences \subseteq AllFences /\ ClearWritten \in BOOLEAN

Readers == 0 .. NReaders - 1
Slots   == 0 .. NReaders - 1
Chunks  == 0 .. NChunks - 1
Msgs    == 1 .. MaxMsgs
Empty   == 0
Torn    == -1
None    == -2
Succ(c) == (c + 1) % NChunks
Has(f)  == f \in Fences

\* memory locations
W(c)    == <<"written", c, 0>>
F(c, i) == <<"flag", c, i>>
Lo(c)   == <<"lo", c, 0>>
Hi(c)   == <<"hi", c, 0>>
Locs == {W(c) : c \in Chunks} \cup {F(c, i) : c \in Chunks, i \in Slots}
        \cup {Lo(c) : c \in Chunks} \cup {Hi(c) : c \in Chunks}

VARIABLES
    mem,                                   \* Locs -> value (committed)
    wbuf,                                  \* writer store buffer: Locs -> value (partial)
    rbuf,                                  \* reader store buffers
    wpc, windex, toClear, sent,
    rpc, rindex, pre, delivered

vars == <<mem, wbuf, rbuf, wpc, windex, toClear, sent,
          rpc, rindex, pre, delivered>>

Init ==
    /\ mem = [l \in Locs |-> 0]
    /\ wbuf = [l \in {} |-> 0]                \* empty buffer
    /\ rbuf = [r \in Readers |-> [l \in {} |-> 0]]
    /\ wpc = "poll" /\ windex = 0 /\ toClear = {} /\ sent = 0
    /\ rpc = [r \in Readers |-> "poll"]
    /\ rindex = [r \in Readers |-> 0]
    /\ pre = [r \in Readers |-> None]
    /\ delivered = [r \in Readers |-> <<>>]

\* buffer helpers: a buffer is a function from a subset of Locs to values
Put(b, l, v) == [x \in DOMAIN b \cup {l} |-> IF x = l THEN v ELSE b[x]]
Drop(b, l)   == [x \in DOMAIN b \ {l} |-> b[x]]
Drained(b)   == DOMAIN b = {}
WLoad(l)     == IF l \in DOMAIN wbuf THEN wbuf[l] ELSE mem[l]
RLoad(r, l)  == IF l \in DOMAIN rbuf[r] THEN rbuf[r][l] ELSE mem[l]
\* a fence at this point: must find the buffer drained
WFence(f)    == Has(f) => Drained(wbuf)
RFence(r, f) == Has(f) => Drained(rbuf[r])

Pair(lo, hi) == IF lo = hi THEN lo ELSE Torn

-----------------------------------------------------------------------------
WriterPoll ==
    /\ wpc = "poll"
    /\ IF WLoad(W(windex)) = 0 \/ \A i \in Slots : WLoad(F(windex, i)) = 1
         THEN wpc' = IF ClearWritten THEN "clear" ELSE "fill"
         ELSE UNCHANGED wpc
    /\ UNCHANGED <<mem, wbuf, rbuf, windex, toClear, sent,
                   rpc, rindex, pre, delivered>>

WriterClearWritten ==                     \* FW1 before it
    /\ wpc = "clear"
    /\ WFence("FW1")
    /\ wbuf' = Put(wbuf, W(windex), 0)
    /\ wpc' = "fill"
    /\ UNCHANGED <<mem, rbuf, windex, toClear, sent, rpc, rindex, pre, delivered>>

WriterFillPayload ==                      \* FW2 before it (FW1 if no clear)
    /\ wpc = "fill"
    /\ IF ClearWritten THEN WFence("FW2") ELSE WFence("FW1")
    /\ wbuf' = Put(Put(wbuf, Lo(windex), sent + 1), Hi(windex), sent + 1)
    /\ toClear' = Slots
    /\ wpc' = "flags"
    /\ UNCHANGED <<mem, rbuf, windex, sent, rpc, rindex, pre, delivered>>

WriterClearReadFlag ==                    \* FW3 before the first clear
    /\ wpc = "flags"
    /\ toClear = Slots => WFence("FW3")
    /\ \E i \in toClear :
         /\ wbuf' = Put(wbuf, F(windex, i), 0)
         /\ toClear' = toClear \ {i}
    /\ wpc' = IF toClear' = {} THEN "publish" ELSE "flags"
    /\ UNCHANGED <<mem, rbuf, windex, sent, rpc, rindex, pre, delivered>>

WriterPublish ==                          \* FW4 before it
    /\ wpc = "publish"
    /\ WFence("FW4")
    /\ wbuf' = Put(wbuf, W(windex), 1)
    /\ windex' = Succ(windex)
    /\ sent' = sent + 1
    /\ wpc' = IF sent + 1 = MaxMsgs THEN "done" ELSE "poll"
    /\ UNCHANGED <<mem, rbuf, toClear, rpc, rindex, pre, delivered>>

WriterCommit ==                           \* a pending store becomes visible
    /\ \E l \in DOMAIN wbuf :
         /\ mem' = [mem EXCEPT ![l] = wbuf[l]]
         /\ wbuf' = Drop(wbuf, l)
    /\ UNCHANGED <<rbuf, wpc, windex, toClear, sent, rpc, rindex, pre, delivered>>

-----------------------------------------------------------------------------
\* Without FR1: the payload loads are performed before the poll loads.
ReaderPrefetch(r) ==
    /\ ~Has("FR1")
    /\ rpc[r] = "poll" /\ pre[r] = None
    /\ pre' = [pre EXCEPT ![r] = Pair(mem[Lo(rindex[r])], mem[Hi(rindex[r])])]
    /\ UNCHANGED <<mem, wbuf, rbuf, wpc, windex, toClear, sent,
                   rpc, rindex, delivered>>

ReaderPoll(r) ==
    LET c == rindex[r] IN
    /\ rpc[r] = "poll"
    /\ IF RLoad(r, W(c)) = 1 /\ RLoad(r, F(c, r)) = 0
         THEN /\ rpc' = [rpc EXCEPT ![r] = "read"]
              /\ UNCHANGED pre
         ELSE /\ UNCHANGED rpc                       \* spin
              /\ pre' = [pre EXCEPT ![r] = None]      \* prefetch discarded
    /\ UNCHANGED <<mem, wbuf, rbuf, wpc, windex, toClear, sent,
                   rindex, delivered>>

\* Payload loads (or the prefetched value); FR1 before them (the step that
\* leaves state "read" is the first one after FR1).  In state
\* "early" the release store was already issued (no FR2).
ReaderReadPayload(r) ==
    LET c == rindex[r]
        v == IF pre[r] # None THEN pre[r] ELSE Pair(mem[Lo(c)], mem[Hi(c)])
    IN
    /\ rpc[r] \in {"read", "early"}
    /\ rpc[r] = "read" => RFence(r, "FR1")   \* "early" passed FR1 already
    /\ delivered' = [delivered EXCEPT ![r] = Append(@, v)]
    /\ pre' = [pre EXCEPT ![r] = None]
    /\ IF rpc[r] = "read"
         THEN /\ rpc' = [rpc EXCEPT ![r] = "release"]
              /\ UNCHANGED rindex
         ELSE /\ rindex' = [rindex EXCEPT ![r] = Succ(c)]
              /\ rpc' = [rpc EXCEPT ![r] = IF Len(delivered'[r]) >= MaxMsgs
                                             THEN "done" ELSE "poll"]
    /\ UNCHANGED <<mem, wbuf, rbuf, wpc, windex, toClear, sent>>

\* Release store (FR2 before it).  Without FR2 it may be issued before the
\* payload loads (from state "read", going to "early").
ReaderRelease(r) ==
    LET c == rindex[r] IN
    /\ \/ rpc[r] = "release"
       \/ rpc[r] = "read" /\ ~Has("FR2") /\ RFence(r, "FR1")
    /\ RFence(r, "FR2")
    /\ rbuf' = [rbuf EXCEPT ![r] = Put(@, F(c, r), 1)]
    /\ IF rpc[r] = "release"
         THEN /\ rindex' = [rindex EXCEPT ![r] = Succ(c)]
              /\ rpc' = [rpc EXCEPT ![r] = IF Len(delivered[r]) >= MaxMsgs
                                             THEN "done" ELSE "poll"]
         ELSE /\ rpc' = [rpc EXCEPT ![r] = "early"]
              /\ UNCHANGED rindex
    /\ UNCHANGED <<mem, wbuf, wpc, windex, toClear, sent, pre, delivered>>

ReaderCommit(r) ==
    /\ \E l \in DOMAIN rbuf[r] :
         /\ mem' = [mem EXCEPT ![l] = rbuf[r][l]]
         /\ rbuf' = [rbuf EXCEPT ![r] = Drop(@, l)]
    /\ UNCHANGED <<wbuf, wpc, windex, toClear, sent, rpc, rindex, pre, delivered>>

-----------------------------------------------------------------------------
AllDone == /\ wpc = "done" /\ Drained(wbuf)
           /\ \A r \in Readers : rpc[r] = "done" /\ Drained(rbuf[r])
Done == AllDone /\ UNCHANGED vars

Writer == \/ WriterPoll \/ WriterClearWritten \/ WriterFillPayload
          \/ WriterClearReadFlag \/ WriterPublish
Reader(r) == ReaderPrefetch(r) \/ ReaderPoll(r) \/ ReaderReadPayload(r)
             \/ ReaderRelease(r)

Next == \/ Writer \/ WriterCommit
        \/ \E r \in Readers : Reader(r) \/ ReaderCommit(r)
        \/ Done

\* Fairness on the protocol steps and on the commits (stores become
\* visible eventually).  Not on ReaderPrefetch alone: it is one disjunct of
\* Reader(r), and WF on Reader(r) cannot be satisfied by prefetching forever
\* because a prefetch is followed by a poll that either proceeds or resets.
Fairness == /\ WF_vars(Writer) /\ WF_vars(WriterCommit)
            /\ \A r \in Readers : WF_vars(Reader(r)) /\ WF_vars(ReaderCommit(r))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
TypeOKInv ==
    /\ DOMAIN wbuf \subseteq Locs
    /\ wpc \in {"poll", "clear", "fill", "flags", "publish", "done"}
    /\ \A r \in Readers : rpc[r] \in {"poll", "read", "early", "release", "done"}
    /\ sent \in 0 .. MaxMsgs

NoTornReadInv ==
    \A r \in Readers : \A k \in 1 .. Len(delivered[r]) : delivered[r][k] # Torn

\* in order, none skipped, none duplicated (see RingBuffer.tla)
DeliveredPrefixInv ==
    \A r \in Readers : \A k \in 1 .. Len(delivered[r]) : delivered[r][k] = k

PublishedBeforeReadInv ==
    \A r \in Readers : Len(delivered[r]) <= sent

AllDoneProp == <>AllDone
=============================================================================
