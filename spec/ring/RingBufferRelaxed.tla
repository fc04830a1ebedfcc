--------------------------- MODULE RingBufferRelaxed ---------------------------
(***************************************************************************)
(* The ring protocol of RingBuffer.tla under a RELAXED memory model, to    *)
(* show which of the fences in src/verifiedring/ordering.py are needed.    *)
(*                                                                         *)
(* The steps are RingBuffer's: the reader's poll loads its own read flag   *)
(* (ReaderPollReadFlag), then `written` (ReaderPollWritten); the writer's  *)
(* loads `written` (WriterPollWritten), then the flags one at a time       *)
(* (WriterPollReadFlag); the flag clears are one store per reader, in      *)
(* order.  Fences (src/verifiedring/ordering.py), each placed after the    *)
(* step it follows:                                                        *)
(*   FW1  after a successful poll        FR0  after the own-flag load (0)  *)
(*   FW2  after WriterClearWritten       FR1  after written = 1 was loaded *)
(*   FW3  after WriterFillPayload        FR2  after the payload loads      *)
(*   FW4  after the last flag clear                                        *)
(*                                                                         *)
(* Memory model (an ARM/POWER-like abstraction, non-speculative stores):   *)
(*  - store->store and store->load reordering: every store goes into the   *)
(*    issuing process's store buffer; pending stores commit to memory one  *)
(*    at a time in ANY order (Commit steps).  A process's own loads see    *)
(*    its pending stores (forwarding); other processes see memory only.    *)
(*  - load->load reordering (reader): without FR0 the reader's `written`   *)
(*    load may be performed before its own-flag load (ReaderEarlyWritten). *)
(*    Without FR1 its payload loads may be performed before the poll's     *)
(*    loads (ReaderEarlyPayload): before the `written` load, and, without  *)
(*    FR0 as well, before the flag load too.  An early load's value is     *)
(*    what the later step uses; a failed poll discards it.                 *)
(*  - load->store reordering (reader): without FR2 the reader's release    *)
(*    store may be issued (and commit) before its payload loads.           *)
(*  - A fence waits until the process's store buffer is empty and forbids  *)
(*    the reorderings above across it.                                     *)
(*  - Stores are never speculative: a store after the writer's poll loop   *)
(*    cannot become visible before the loads that ended the loop.  So FW1  *)
(*    only drains the previous message's publish store here.               *)
(*  - The writer's poll loads stay in program order.  Reordering them      *)
(*    could not change what they return: `written` is the writer's own     *)
(*    location (its load sees its own latest store), and a read flag only  *)
(*    goes 0 -> 1 while the writer polls, so an earlier load of it returns *)
(*    the same or an older value (PollFlagsStableInv checks this).         *)
(*                                                                         *)
(* The payload of a chunk is two words (lo, hi) stored by two separate     *)
(* stores, so a torn read is a delivered pair with lo # hi.                *)
(*                                                                         *)
(* Constants Fences (a subset of AllFences) and ClearWritten select the    *)
(* variant: the full protocol is Fences = AllFences, ClearWritten = TRUE.  *)
(* MaxAborts bounds the writer's aborts (WriterAbort, as RingBuffer.tla): *)
(* the stores the write already issued stay buffered or committed.  Reader *)
(* raises are not modeled here (RingBuffer.tla covers them under SC).      *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS NReaders, NChunks, MaxMsgs, Fences, ClearWritten, MaxAborts

AllFences == {"FW1", "FW2", "FW3", "FW4", "FR0", "FR1", "FR2"}
ASSUME Fences \subseteq AllFences /\ ClearWritten \in BOOLEAN /\ MaxAborts \in Nat

Readers == 0 .. NReaders - 1
FlagIdx == 0 .. NReaders - 1
Chunks  == 0 .. NChunks - 1
Msgs    == 1 .. MaxMsgs
Empty   == 0
Torn    == -1
None    == -2
Succ(c) == (c + 1) % NChunks
LastFlag == NReaders - 1
Has(f)  == f \in Fences

\* memory locations
W(c)    == <<"written", c, 0>>
F(c, i) == <<"flag", c, i>>
Lo(c)   == <<"lo", c, 0>>
Hi(c)   == <<"hi", c, 0>>
Locs == {W(c) : c \in Chunks} \cup {F(c, i) : c \in Chunks, i \in FlagIdx}
        \cup {Lo(c) : c \in Chunks} \cup {Hi(c) : c \in Chunks}

VARIABLES
    mem,                                   \* Locs -> value (committed)
    wbuf,                                  \* writer store buffer: Locs -> value (partial)
    rbuf,                                  \* reader store buffers
    wpc, windex, wflag, sent,
    aborts,                                \* writes aborted so far
    rpc, rindex,
    preW,                                  \* preW[r]: `written` loaded early, or None
    pre,                                   \* pre[r]: payload loaded early, or None
    delivered

vars == <<mem, wbuf, rbuf, wpc, windex, wflag, sent, aborts,
          rpc, rindex, preW, pre, delivered>>

Init ==
    /\ mem = [l \in Locs |-> 0]
    /\ wbuf = [l \in {} |-> 0]                \* empty buffer
    /\ rbuf = [r \in Readers |-> [l \in {} |-> 0]]
    /\ wpc = "poll" /\ windex = 0 /\ wflag = 0 /\ sent = 0
    /\ aborts = 0
    /\ rpc = [r \in Readers |-> "poll"]
    /\ rindex = [r \in Readers |-> 0]
    /\ preW = [r \in Readers |-> None]
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
\* where a successful poll goes: WriterClearWritten, or straight to the payload
Claimed == IF ClearWritten THEN "clear" ELSE "fill"

WriterPollWritten ==
    /\ wpc = "poll"
    /\ wpc' = IF WLoad(W(windex)) = 0 THEN Claimed ELSE "pollflag"
    /\ UNCHANGED <<aborts, mem, wbuf, rbuf, windex, wflag, sent,
                   rpc, rindex, preW, pre, delivered>>

WriterPollReadFlag ==
    /\ wpc = "pollflag"
    /\ IF WLoad(F(windex, wflag)) = 0
         THEN wpc' = "poll" /\ wflag' = 0
       ELSE IF wflag = LastFlag
         THEN wpc' = Claimed /\ wflag' = 0
         ELSE wpc' = "pollflag" /\ wflag' = wflag + 1
    /\ UNCHANGED <<aborts, mem, wbuf, rbuf, windex, sent, rpc, rindex, preW, pre, delivered>>

WriterClearWritten ==                     \* FW1 before it
    /\ wpc = "clear"
    /\ WFence("FW1")
    /\ wbuf' = Put(wbuf, W(windex), 0)
    /\ wpc' = "fill"
    /\ UNCHANGED <<aborts, mem, rbuf, windex, wflag, sent, rpc, rindex, preW, pre, delivered>>

WriterFillPayload ==                      \* FW2 before it (FW1 if no clear)
    /\ wpc = "fill"
    /\ IF ClearWritten THEN WFence("FW2") ELSE WFence("FW1")
    /\ wbuf' = Put(Put(wbuf, Lo(windex), sent + 1), Hi(windex), sent + 1)
    /\ wpc' = "flags"
    /\ UNCHANGED <<aborts, mem, rbuf, windex, wflag, sent, rpc, rindex, preW, pre, delivered>>

WriterClearReadFlag ==                    \* FW3 before the first clear; in order
    /\ wpc = "flags"
    /\ wflag = 0 => WFence("FW3")
    /\ wbuf' = Put(wbuf, F(windex, wflag), 0)
    /\ IF wflag = LastFlag
         THEN wpc' = "publish" /\ wflag' = 0
         ELSE wpc' = "flags" /\ wflag' = wflag + 1
    /\ UNCHANGED <<aborts, mem, rbuf, windex, sent, rpc, rindex, preW, pre, delivered>>

WriterPublish ==                          \* FW4 before it
    /\ wpc = "publish"
    /\ WFence("FW4")
    /\ wbuf' = Put(wbuf, W(windex), 1)
    /\ windex' = Succ(windex)
    /\ sent' = sent + 1
    /\ wpc' = IF sent + 1 = MaxMsgs THEN "done" ELSE "poll"
    /\ UNCHANGED <<aborts, mem, rbuf, wflag, rpc, rindex, preW, pre, delivered>>

\* cursors.py: WriterCursor.__exit__ with an exception (WriterAbort).  From
\* "fill" the caller raised part-way through its stores (after FW2, or FW1
\* without the clear): one payload word is stored, so the chunk is torn.
\* From "flags"/"publish" an asynchronous exception landed in publish()
\* after the payload stores and the clears of flags 0 .. wflag-1 (before
\* or after the FW3/FW4 fence call, so no fence is required here).  The
\* abort path makes no store and has no fence: every store already issued
\* stays in the buffer (it commits later, in any order) or in memory;
\* windex does not advance, the message is not sent, the next write reuses
\* the chunk (its FW1 drains the buffer before its first store).
WriterAbort ==
    /\ wpc \in {"fill", "flags", "publish"}
    /\ aborts < MaxAborts
    /\ wpc = "fill" => IF ClearWritten THEN WFence("FW2") ELSE WFence("FW1")
    /\ wbuf' = IF wpc = "fill" THEN Put(wbuf, Lo(windex), Torn) ELSE wbuf
    /\ aborts' = aborts + 1
    /\ wpc' = "poll"
    /\ wflag' = 0
    /\ UNCHANGED <<mem, rbuf, windex, sent, rpc, rindex, preW, pre, delivered>>

WriterCommit ==                           \* a pending store becomes visible
    /\ \E l \in DOMAIN wbuf :
         /\ mem' = [mem EXCEPT ![l] = wbuf[l]]
         /\ wbuf' = Drop(wbuf, l)
    /\ UNCHANGED <<aborts, rbuf, wpc, windex, wflag, sent, rpc, rindex, preW, pre, delivered>>

-----------------------------------------------------------------------------
\* Without FR0: the poll's `written` load is performed before its own-flag load.
ReaderEarlyWritten(r) ==
    /\ ~Has("FR0")
    /\ rpc[r] = "poll" /\ preW[r] = None
    /\ preW' = [preW EXCEPT ![r] = mem[W(rindex[r])]]
    /\ UNCHANGED <<aborts, mem, wbuf, rbuf, wpc, windex, wflag, sent,
                   rpc, rindex, pre, delivered>>

\* Without FR1: the payload loads are performed before the poll's `written`
\* load (after FR0), or, without FR0 too, before its flag load.
ReaderEarlyPayload(r) ==
    /\ ~Has("FR1")
    /\ \/ rpc[r] = "poll2"
       \/ rpc[r] = "poll" /\ ~Has("FR0")
    /\ pre[r] = None
    /\ pre' = [pre EXCEPT ![r] = Pair(mem[Lo(rindex[r])], mem[Hi(rindex[r])])]
    /\ UNCHANGED <<aborts, mem, wbuf, rbuf, wpc, windex, wflag, sent,
                   rpc, rindex, preW, delivered>>

\* A failed poll: the next one starts from its first load; early loads are void.
PollFails(r) ==
    /\ rpc' = [rpc EXCEPT ![r] = "poll"]
    /\ preW' = [preW EXCEPT ![r] = None]
    /\ pre' = [pre EXCEPT ![r] = None]

ReaderPollReadFlag(r) ==
    LET c == rindex[r] IN
    /\ rpc[r] = "poll"
    /\ IF RLoad(r, F(c, r)) = 0
         THEN rpc' = [rpc EXCEPT ![r] = "poll2"] /\ UNCHANGED <<aborts, preW, pre>>
         ELSE PollFails(r)
    /\ UNCHANGED <<aborts, mem, wbuf, rbuf, wpc, windex, wflag, sent, rindex, delivered>>

ReaderPollWritten(r) ==                   \* FR0 before it
    LET c == rindex[r]
        w == IF preW[r] # None THEN preW[r] ELSE mem[W(c)]
    IN
    /\ rpc[r] = "poll2"
    /\ RFence(r, "FR0")
    /\ IF w = 1
         THEN /\ rpc' = [rpc EXCEPT ![r] = "read"]
              /\ preW' = [preW EXCEPT ![r] = None]
              /\ UNCHANGED pre
         ELSE PollFails(r)
    /\ UNCHANGED <<aborts, mem, wbuf, rbuf, wpc, windex, wflag, sent, rindex, delivered>>

\* Payload loads (or the early-loaded value); FR1 before them (the step that
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
    /\ UNCHANGED <<aborts, mem, wbuf, rbuf, wpc, windex, wflag, sent, preW>>

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
    /\ UNCHANGED <<aborts, mem, wbuf, wpc, windex, wflag, sent, preW, pre, delivered>>

ReaderCommit(r) ==
    /\ \E l \in DOMAIN rbuf[r] :
         /\ mem' = [mem EXCEPT ![l] = rbuf[r][l]]
         /\ rbuf' = [rbuf EXCEPT ![r] = Drop(@, l)]
    /\ UNCHANGED <<aborts, wbuf, wpc, windex, wflag, sent, rpc, rindex, preW, pre, delivered>>

-----------------------------------------------------------------------------
AllDone == /\ wpc = "done" /\ Drained(wbuf)
           /\ \A r \in Readers : rpc[r] = "done" /\ Drained(rbuf[r])
Done == AllDone /\ UNCHANGED vars

Writer == \/ WriterPollWritten \/ WriterPollReadFlag \/ WriterClearWritten
          \/ WriterFillPayload \/ WriterClearReadFlag \/ WriterPublish
          \/ WriterAbort
Reader(r) == \/ ReaderEarlyWritten(r) \/ ReaderEarlyPayload(r)
             \/ ReaderPollReadFlag(r) \/ ReaderPollWritten(r)
             \/ ReaderReadPayload(r) \/ ReaderRelease(r)

Next == \/ Writer \/ WriterCommit
        \/ \E r \in Readers : Reader(r) \/ ReaderCommit(r)
        \/ Done

\* Fairness on the protocol steps and on the commits (stores become
\* visible eventually).  Not on the early loads alone: they are disjuncts of
\* Reader(r), and WF on Reader(r) cannot be satisfied by early loads forever
\* (one of each at most per poll; a poll step either proceeds or resets).
Fairness == /\ WF_vars(Writer) /\ WF_vars(WriterCommit)
            /\ \A r \in Readers : WF_vars(Reader(r)) /\ WF_vars(ReaderCommit(r))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
TypeOKInv ==
    /\ DOMAIN wbuf \subseteq Locs
    /\ wpc \in {"poll", "pollflag", "clear", "fill", "flags", "publish", "done"}
    /\ wflag \in FlagIdx
    /\ \A r \in Readers : rpc[r] \in {"poll", "poll2", "read", "early", "release", "done"}
    /\ sent \in 0 .. MaxMsgs
    /\ aborts \in 0 .. MaxAborts

NoTornReadInv ==
    \A r \in Readers : \A k \in 1 .. Len(delivered[r]) : delivered[r][k] # Torn

\* in order, none skipped, none duplicated (see RingBuffer.tla)
DeliveredPrefixInv ==
    \A r \in Readers : \A k \in 1 .. Len(delivered[r]) : delivered[r][k] = k

PublishedBeforeReadInv ==
    \A r \in Readers : Len(delivered[r]) <= sent

\* The message chunk c holds, as the writer sees it (only the writer stores
\* payloads, so its own view is the latest).
Stored(c) == WLoad(Lo(c))

\* From the successful poll until the payload stores are issued, every
\* reader has read the message in the claimed chunk (see RingBuffer.tla);
\* one that was sent (an aborted write leaves its unsent payload behind).
NoOverwriteUnreadInv ==
    wpc \in {"clear", "fill"} /\ Stored(windex) \in 1 .. sent =>
        \A r \in Readers : \E k \in 1 .. Len(delivered[r]) :
            delivered[r][k] = Stored(windex)

\* The writer's 1 + N-load poll (see RingBuffer.tla): a flag the poll has
\* loaded as 1 still loads as 1, and a chunk claimed through its flags
\* (written was 1) has every flag 1 at the claim.
PollFlagsStableInv ==
    /\ wpc = "pollflag" => \A i \in 0 .. wflag - 1 : WLoad(F(windex, i)) = 1
    /\ wpc = Claimed /\ WLoad(W(windex)) = 1 =>
           \A i \in FlagIdx : WLoad(F(windex, i)) = 1

AllDoneProp == <>AllDone
=============================================================================
