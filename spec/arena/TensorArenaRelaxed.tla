------------------------- MODULE TensorArenaRelaxed -------------------------
(***************************************************************************)
(* The tensor arena of TensorArena.tla (src/verifiedring/arena.py) under   *)
(* the relaxed memory model of RingBufferRelaxed.tla, to show which of the *)
(* arena's fences are needed.  One writer, the local readers, a few slots, *)
(* one large tensor per message; no failed enqueue.  A reader is one       *)
(* processor (its lock orders its threads' steps: TensorArena.tla,         *)
(* ReleaseDesign = "locked").                                              *)
(*                                                                         *)
(* Locations: O(s, r) reader r's owes byte of slot s, Q(s) the slot's seq  *)
(* (with its gen), D(s) its bytes (the message id they are of).  Fences,   *)
(* each at its code site in arena.py:                                      *)
(*   FA1  writer: the owes loads that found the slot free -> its stores    *)
(*   FA4  writer: the seq/gen store -> the owes stores (ArenaClaim)        *)
(*   FA5  reader: the sweep's owes load -> its seq load                    *)
(*   FA2  reader: the sweep's seq load -> its release store                *)
(*   FA3  reader: the view's loads -> the release store                    *)
(*                                                                         *)
(* Memory model (RingBufferRelaxed's): every store goes into its           *)
(* processor's store buffer and commits to memory later, pending stores in *)
(* any order; a processor's loads see its own pending stores; a fence      *)
(* waits for an empty buffer and forbids the reorderings below across it.  *)
(* Stores are not speculative: a store never becomes visible before the    *)
(* loads its branch depends on.  Load->load (reader, without FA5): the     *)
(* sweep's seq load may be performed before its owes load                  *)
(* (ArenaDropEarlySeq).  Load->store (reader, without FA3): the release    *)
(* store may be issued before the view's loads (the view is then `late`).  *)
(* The queue is abstracted as in TensorArena.tla; its ring's fences drain  *)
(* the writer's buffer before a publish and a reader's before its take.    *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS Readers, Slots, M, MaxDecodeFails, Fences
CONSTANT NoSlot  \* a model value: the tensor travelled in the message

AllFences == {"FA1", "FA2", "FA3", "FA4", "FA5"}
ASSUME Fences \subseteq AllFences
Has(f) == f \in Fences
Msgs == 1..M
None == [s |-> NoSlot, v |-> 0]  \* no early seq load

O(s, r) == <<"owes", s, r>>
Q(s) == <<"seq", s, s>>
D(s) == <<"data", s, s>>
Locs == {O(s, r) : s \in Slots, r \in Readers} \cup {Q(s) : s \in Slots} \cup {D(s) : s \in Slots}

VARIABLES
    mem,     \* Locs -> value (committed)
    wbuf,    \* the writer's store buffer: a function on the locations it has pending
    rbuf,    \* rbuf[r]: reader r's store buffer
    wpc,     \* "begin" | "copy" | "publish" | "done"
    wslot,   \* the slot claimed for message `next`, or NoSlot
    next,    \* the message being written
    sent,    \* published messages, in order: [m, slot]
    rpc,     \* "idle" | "rebuild"
    rnext,   \* the next message reader r takes
    rmsg,    \* the message a rebuilding reader took
    views,   \* views[r]: r's live (registered) views, as [slot, m]
    toread,  \* toread[r]: views whose loads are still to be performed
    late,    \* late[r]: views released before their loads (no FA3)
    drop,    \* drop[r]: the slot whose owes load the sweep found 1 (its seq load next), or NoSlot
    early,   \* early[r]: the sweep's seq load performed before its owes load, or None
    got,     \* got[r]: <<m, the message whose bytes r's view of m loaded>>
    fails    \* decode failures so far

wvars == <<wpc, wslot, next, sent>>
rvars == <<rpc, rnext, rmsg, views, toread, late, drop, early, got, fails>>
vars == <<mem, wbuf, rbuf, wvars, rvars>>

NoMsg == [m |-> 0, slot |-> NoSlot]
ViewedSlots(r) == {v.slot : v \in views[r]}

Put(b, l, v) == [x \in DOMAIN b \cup {l} |-> IF x = l THEN v ELSE b[x]]
Drop(b, l) == [x \in DOMAIN b \ {l} |-> b[x]]
Drained(b) == DOMAIN b = {}
WLoad(l) == IF l \in DOMAIN wbuf THEN wbuf[l] ELSE mem[l]
RLoad(r, l) == IF l \in DOMAIN rbuf[r] THEN rbuf[r][l] ELSE mem[l]
RFence(r, f) == Has(f) => Drained(rbuf[r])
PutOwes(b, s) == [x \in DOMAIN b \cup {O(s, r) : r \in Readers} |->
                    IF x \in {O(s, r) : r \in Readers} THEN 1 ELSE b[x]]

Init ==
    /\ mem = [l \in Locs |-> 0]
    /\ wbuf = [l \in {} |-> 0]
    /\ rbuf = [r \in Readers |-> [l \in {} |-> 0]]
    /\ wpc = "begin" /\ wslot = NoSlot /\ next = 1 /\ sent = <<>>
    /\ rpc = [r \in Readers |-> "idle"]
    /\ rnext = [r \in Readers |-> 1]
    /\ rmsg = [r \in Readers |-> NoMsg]
    /\ views = [r \in Readers |-> {}]
    /\ toread = [r \in Readers |-> {}]
    /\ late = [r \in Readers |-> {}]
    /\ drop = [r \in Readers |-> NoSlot]
    /\ early = [r \in Readers |-> None]
    /\ got = [r \in Readers |-> {}]
    /\ fails = 0

(* --- the writer ---------------------------------------------------------- *)

Free(s) == (\A r \in Readers : WLoad(O(s, r)) = 0) \/ WLoad(Q(s)) >= next

(* The free loads, FA1, the seq/gen store, FA4, every owes byte = 1.  With   *)
(* FA4 the seq store is committed (the buffer drained) before the owes      *)
(* stores are issued.                                                        *)
ArenaClaim(s) ==
    /\ wpc = "begin"
    /\ Free(s)
    /\ Has("FA1") => Drained(wbuf)
    /\ IF Has("FA4")
         THEN /\ mem' = [l \in Locs |-> IF l = Q(s) THEN next
                                        ELSE IF l \in DOMAIN wbuf THEN wbuf[l] ELSE mem[l]]
              /\ wbuf' = PutOwes([l \in {} |-> 0], s)
         ELSE /\ wbuf' = PutOwes(Put(wbuf, Q(s), next), s)
              /\ UNCHANGED mem
    /\ wslot' = s /\ wpc' = "copy"
    /\ UNCHANGED <<rbuf, next, sent, rvars>>

ArenaFallback ==
    /\ wpc = "begin"
    /\ \A s \in Slots : ~Free(s)
    /\ wslot' = NoSlot /\ wpc' = "publish"
    /\ UNCHANGED <<mem, wbuf, rbuf, next, sent, rvars>>

ArenaCopy ==
    /\ wpc = "copy"
    /\ wbuf' = Put(wbuf, D(wslot), next)
    /\ wpc' = "publish"
    /\ UNCHANGED <<mem, rbuf, wslot, next, sent, rvars>>

QueuePublish ==  \* the ring's fences drained the writer's stores first
    /\ wpc = "publish"
    /\ Drained(wbuf)
    /\ sent' = Append(sent, [m |-> next, slot |-> wslot])
    /\ next' = next + 1
    /\ wpc' = IF next = M THEN "done" ELSE "begin"
    /\ wslot' = NoSlot
    /\ UNCHANGED <<mem, wbuf, rbuf, rvars>>

WriterCommit ==
    /\ \E l \in DOMAIN wbuf :
         /\ mem' = [mem EXCEPT ![l] = wbuf[l]]
         /\ wbuf' = Drop(wbuf, l)
    /\ UNCHANGED <<rbuf, wvars, rvars>>

(* --- a reader -------------------------------------------------------------- *)

QueueTake(r) ==  \* the ring's fences drained r's stores; consumed before decoded
    /\ rpc[r] = "idle" /\ drop[r] = NoSlot /\ early[r] = None
    /\ rnext[r] <= Len(sent)
    /\ Drained(rbuf[r])
    /\ LET msg == sent[rnext[r]] IN
         /\ rnext' = [rnext EXCEPT ![r] = @ + 1]
         /\ IF msg.slot = NoSlot
              THEN UNCHANGED <<rpc, rmsg>>
              ELSE /\ rpc' = [rpc EXCEPT ![r] = "rebuild"]
                   /\ rmsg' = [rmsg EXCEPT ![r] = msg]
    /\ UNCHANGED <<mem, wbuf, rbuf, wvars, views, toread, late, drop, early, got, fails>>

ArenaRebuild(r) ==
    /\ rpc[r] = "rebuild"
    /\ LET v == [slot |-> rmsg[r].slot, m |-> rmsg[r].m] IN
         /\ views' = [views EXCEPT ![r] = @ \cup {v}]
         /\ toread' = [toread EXCEPT ![r] = @ \cup {v}]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ rmsg' = [rmsg EXCEPT ![r] = NoMsg]
    /\ UNCHANGED <<mem, wbuf, rbuf, wvars, rnext, late, drop, early, got, fails>>

QueueDecodeFail(r) ==  \* no view was made
    /\ rpc[r] = "rebuild"
    /\ fails < MaxDecodeFails
    /\ fails' = fails + 1
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ rmsg' = [rmsg EXCEPT ![r] = NoMsg]
    /\ UNCHANGED <<mem, wbuf, rbuf, wvars, rnext, views, toread, late, drop, early, got>>

ArenaViewLoads(r, v) ==  \* the application reads its view (any time before its death)
    /\ v \in toread[r]
    /\ got' = [got EXCEPT ![r] = @ \cup {<<v.m, mem[D(v.slot)]>>}]
    /\ toread' = [toread EXCEPT ![r] = @ \ {v}]
    /\ late' = [late EXCEPT ![r] = @ \ {v}]
    /\ UNCHANGED <<mem, wbuf, rbuf, wvars, rpc, rnext, rmsg, views, drop, early, fails>>

(* The view dies: FA3, then the release store.  Without FA3 the store may be *)
(* issued before the view's loads are performed (they stay, `late`).         *)
ArenaRelease(r, v) ==
    /\ v \in views[r]
    /\ Has("FA3") => v \notin toread[r] /\ Drained(rbuf[r])
    /\ rbuf' = [rbuf EXCEPT ![r] = Put(@, O(v.slot, r), 0)]
    /\ views' = [views EXCEPT ![r] = @ \ {v}]
    /\ late' = [late EXCEPT ![r] = IF v \in toread[r] THEN @ \cup {v} ELSE @]
    /\ UNCHANGED <<mem, wbuf, wvars, rpc, rnext, rmsg, toread, drop, early, got, fails>>

(* The sweep (at a dequeue's start) of slot s: owes load, FA5, seq load, FA2, *)
(* store.  Without FA5 the seq load may come first (ArenaDropEarlySeq).      *)
ArenaDropEarlySeq(r, s) ==
    /\ ~Has("FA5")
    /\ rpc[r] = "idle" /\ drop[r] = NoSlot /\ early[r] = None
    /\ early' = [early EXCEPT ![r] = [s |-> s, v |-> mem[Q(s)]]]
    /\ UNCHANGED <<mem, wbuf, rbuf, wvars, rpc, rnext, rmsg, views, toread, late, drop, got, fails>>

ArenaDropLoadOwes(r, s) ==
    /\ rpc[r] = "idle" /\ drop[r] = NoSlot
    /\ early[r] \in {None} \cup {[s |-> s, v |-> x] : x \in 0..M}
    /\ s \notin ViewedSlots(r)
    /\ IF RLoad(r, O(s, r)) = 1
         THEN /\ drop' = [drop EXCEPT ![r] = s]
              /\ UNCHANGED early
         ELSE /\ early' = [early EXCEPT ![r] = None]
              /\ UNCHANGED drop
    /\ UNCHANGED <<mem, wbuf, rbuf, wvars, rpc, rnext, rmsg, views, toread, late, got, fails>>

(* A slot never claimed has seq 0, the code's first message's sequence number *)
(* (message m is the code's seq m - 1): it reads as message 1's.             *)
ArenaDropRelease(r) ==
    LET s == drop[r]
        loaded == IF early[r] = None THEN mem[Q(s)] ELSE early[r].v
        seq == IF loaded = 0 THEN 1 ELSE loaded
    IN
    /\ s # NoSlot
    /\ early[r] = None => RFence(r, "FA5")
    /\ IF seq < rnext[r]
         THEN /\ RFence(r, "FA2")
              /\ rbuf' = [rbuf EXCEPT ![r] = Put(@, O(s, r), 0)]
         ELSE UNCHANGED rbuf
    /\ drop' = [drop EXCEPT ![r] = NoSlot]
    /\ early' = [early EXCEPT ![r] = None]
    /\ UNCHANGED <<mem, wbuf, wvars, rpc, rnext, rmsg, views, toread, late, got, fails>>

ReaderCommit(r) ==
    /\ \E l \in DOMAIN rbuf[r] :
         /\ mem' = [mem EXCEPT ![l] = rbuf[r][l]]
         /\ rbuf' = [rbuf EXCEPT ![r] = Drop(@, l)]
    /\ UNCHANGED <<wbuf, wvars, rvars>>

Writer == (\E s \in Slots : ArenaClaim(s)) \/ ArenaFallback \/ ArenaCopy \/ QueuePublish
Reader(r) == QueueTake(r) \/ ArenaRebuild(r) \/ QueueDecodeFail(r)
             \/ (\E v \in [slot : Slots, m : Msgs] : ArenaViewLoads(r, v) \/ ArenaRelease(r, v))
             \/ (\E s \in Slots : ArenaDropEarlySeq(r, s) \/ ArenaDropLoadOwes(r, s))
             \/ ArenaDropRelease(r)

Finished == wpc = "done" /\ Drained(wbuf)
            /\ \A r \in Readers : rpc[r] = "idle" /\ rnext[r] > M /\ Drained(rbuf[r])
Done == Finished /\ UNCHANGED vars

Next == Writer \/ WriterCommit \/ (\E r \in Readers : Reader(r) \/ ReaderCommit(r)) \/ Done

Spec == Init /\ [][Next]_vars

(* --- properties ------------------------------------------------------------ *)

TypeOKInv ==
    /\ mem \in [Locs -> 0..M]
    /\ wpc \in {"begin", "copy", "publish", "done"}
    /\ rpc \in [Readers -> {"idle", "rebuild"}]
    /\ drop \in [Readers -> Slots \cup {NoSlot}]

(* A live view is owed: its reader's byte, as that reader loads it, is 1. *)
ViewOwedInv == \A r \in Readers : \A v \in views[r] : RLoad(r, O(v.slot, r)) = 1

(* Every view's loads returned exactly the bytes copied for its message. *)
ViewIntactInv == \A r \in Readers : \A g \in got[r] : g[2] = g[1]
=============================================================================
