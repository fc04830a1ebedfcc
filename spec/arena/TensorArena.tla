---------------------------- MODULE TensorArena ----------------------------
(* The shared-memory tensor arena (src/verifiedring/arena.py): one writer,  *)
(* the local readers, a few slots.  Each message carries one large tensor.  *)
(* The writer claims a free slot (every reader's owes byte 0, or a slot     *)
(* claimed for a message that was never published), stores seq and owes=1  *)
(* for every reader, copies the tensor in and publishes the message through *)
(* the queue (the ring: abstracted to a sequence every reader takes in      *)
(* order).  No free slot: the tensor travels in the message (fallback), the *)
(* writer never waits.  A reader rebuilds a view over the slot; the view's  *)
(* death (its storage freed) stores owes=0.  Between dequeues a reader also *)
(* clears the byte of every unviewed slot whose message it has consumed (a  *)
(* decode failure made no view); a closing reader, of every unviewed slot.  *)
(* Message ids are sequence numbers 1..M.  Slot contents are modelled by    *)
(* message id (0: no message / being copied).                               *)
(*                                                                           *)
(* Queue* actions are the queue around the arena (their code sites are the  *)
(* queue's); Arena* actions are the arena's, one `# spec:` site each.       *)
(*                                                                           *)
(* A view's finalizer runs in whatever thread drops the view's last         *)
(* reference: a second thread of the reader, beside the dequeuing thread    *)
(* (the sweep, the rebuild).  ReleaseDesign "locked" (the code): one lock   *)
(* per reader makes a release, a sweep's test-and-store and a rebuild each  *)
(* one step.  "unlocked" (the code before issue 18): the finalizer deletes  *)
(* the view's registration in one step and stores owes=0 in a later one    *)
(* (fin), and the sweep tests a slot in one step and stores in a later one  *)
(* (dpend), the other threads' steps in between.                            *)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS Readers, Slots, M, MaxAborts, MaxDecodeFails, Closers
CONSTANT ReleaseDesign  \* "locked" (the code) | "unlocked" (mutant: before issue 18)
ASSUME ReleaseDesign \in {"locked", "unlocked"}

CONSTANT NoSlot  \* a model value: the tensor travelled in the message
Msgs == 1..M

VARIABLES
    owes,      \* owes[s][r] = 1: reader r may still view slot s
    slotSeq,   \* the message slot s was last claimed for (0: never)
    content,   \* the message whose bytes slot s holds (0: none, or being copied)
    wpc,       \* writer: "begin" | "copy" | "publish" | "done"
    wslot,     \* the slot claimed for message `next`, or NoSlot (fallback)
    next,      \* the message being written
    aborts,    \* failed enqueues so far (pickling or ring wait failed: not published)
    sent,      \* published messages, in order: [m, slot]
    rpc,       \* reader: "idle" | "rebuild" | "closing" | "closed"
    rnext,     \* the next message reader r takes (its expected seq)
    rmsg,      \* the message a rebuilding reader took
    views,     \* views[r]: the live views of r, as [slot, m]
    seen,      \* seen[r]: <<m, bytes r's tensor held when rebuilt>> per message received
    fails,     \* decode failures so far
    fin,       \* fin[r]: views of r whose finalizer unregistered them, its store to come
    dpend      \* dpend[r]: the slot r's sweep found releasable, its store to come (or NoSlot)

wvars == <<wpc, wslot, next, aborts, sent>>
rvars == <<rpc, rnext, rmsg, views, seen, fails, fin, dpend>>
vars == <<owes, slotSeq, content, wvars, rvars>>

NoMsg == [m |-> 0, slot |-> NoSlot]
ViewedSlots(r) == {v.slot : v \in views[r]}

Init ==
    /\ owes = [s \in Slots |-> [r \in Readers |-> 0]]
    /\ slotSeq = [s \in Slots |-> 0]
    /\ content = [s \in Slots |-> 0]
    /\ wpc = "begin" /\ wslot = NoSlot /\ next = 1 /\ aborts = 0 /\ sent = <<>>
    /\ rpc = [r \in Readers |-> "idle"]
    /\ rnext = [r \in Readers |-> 1]
    /\ rmsg = [r \in Readers |-> NoMsg]
    /\ views = [r \in Readers |-> {}]
    /\ seen = [r \in Readers |-> <<>>]
    /\ fails = 0
    /\ fin = [r \in Readers |-> {}]
    /\ dpend = [r \in Readers |-> NoSlot]

(* --- the writer ---------------------------------------------------------- *)

Free(s) == (\A r \in Readers : owes[s][r] = 0) \/ slotSeq[s] >= next

ArenaClaim(s) ==
    /\ wpc = "begin"
    /\ Free(s)
    /\ owes' = [owes EXCEPT ![s] = [r \in Readers |-> 1]]
    /\ slotSeq' = [slotSeq EXCEPT ![s] = next]
    /\ content' = [content EXCEPT ![s] = 0]
    /\ wslot' = s /\ wpc' = "copy"
    /\ UNCHANGED <<next, aborts, sent, rvars>>

ArenaFallback ==
    /\ wpc = "begin"
    /\ \A s \in Slots : ~Free(s)
    /\ wslot' = NoSlot /\ wpc' = "publish"
    /\ UNCHANGED <<owes, slotSeq, content, next, aborts, sent, rvars>>

ArenaCopy ==
    /\ wpc = "copy"
    /\ content' = [content EXCEPT ![wslot] = next]
    /\ wpc' = "publish"
    /\ UNCHANGED <<owes, slotSeq, wslot, next, aborts, sent, rvars>>

QueueAbort ==  \* the pickling or the ring wait failed: nothing published, retried
    /\ wpc \in {"copy", "publish"}
    /\ aborts < MaxAborts
    /\ aborts' = aborts + 1 /\ wpc' = "begin" /\ wslot' = NoSlot
    /\ UNCHANGED <<owes, slotSeq, content, next, sent, rvars>>

QueuePublish ==
    /\ wpc = "publish"
    /\ sent' = Append(sent, [m |-> next, slot |-> wslot])
    /\ next' = next + 1
    /\ wpc' = IF next = M THEN "done" ELSE "begin"
    /\ wslot' = NoSlot
    /\ UNCHANGED <<owes, slotSeq, content, aborts, rvars>>

Writer == (\E s \in Slots : ArenaClaim(s)) \/ ArenaFallback \/ ArenaCopy \/ QueueAbort
          \/ QueuePublish

(* --- a reader ------------------------------------------------------------- *)

QueueTake(r) ==  \* consumed before it is decoded (rnext advances now)
    /\ rpc[r] = "idle" /\ dpend[r] = NoSlot
    /\ rnext[r] <= Len(sent)
    /\ LET msg == sent[rnext[r]] IN
         /\ rnext' = [rnext EXCEPT ![r] = @ + 1]
         /\ IF msg.slot = NoSlot
              THEN /\ seen' = [seen EXCEPT ![r] = Append(@, <<msg.m, msg.m>>)]
                   /\ UNCHANGED <<rpc, rmsg>>
              ELSE /\ rpc' = [rpc EXCEPT ![r] = "rebuild"]
                   /\ rmsg' = [rmsg EXCEPT ![r] = msg]
                   /\ UNCHANGED seen
    /\ UNCHANGED <<owes, slotSeq, content, wvars, views, fails, fin, dpend>>

ArenaRebuild(r) ==
    /\ rpc[r] = "rebuild"
    /\ views' = [views EXCEPT ![r] = @ \cup {[slot |-> rmsg[r].slot, m |-> rmsg[r].m]}]
    /\ seen' = [seen EXCEPT ![r] = Append(@, <<rmsg[r].m, content[rmsg[r].slot]>>)]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ rmsg' = [rmsg EXCEPT ![r] = NoMsg]
    /\ UNCHANGED <<owes, slotSeq, content, wvars, rnext, fails, fin, dpend>>

QueueDecodeFail(r) ==  \* the stream did not unpickle: no view was made
    /\ rpc[r] = "rebuild"
    /\ fails < MaxDecodeFails
    /\ fails' = fails + 1
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ rmsg' = [rmsg EXCEPT ![r] = NoMsg]
    /\ UNCHANGED <<owes, slotSeq, content, wvars, rnext, views, seen, fin, dpend>>

(* The view's storage is freed (any time: the application drops it) and its *)
(* finalizer releases it.  "unlocked": first the registration goes (v moves *)
(* to fin: unviewed now, still owed), the store of a later step follows.    *)
ArenaRelease(r, v) ==
    /\ IF v \in views[r]
         THEN /\ views' = [views EXCEPT ![r] = @ \ {v}]
              /\ IF ReleaseDesign = "locked"
                   THEN owes' = [owes EXCEPT ![v.slot][r] = 0] /\ UNCHANGED fin
                   ELSE fin' = [fin EXCEPT ![r] = @ \cup {v}] /\ UNCHANGED owes
         ELSE /\ v \in fin[r]
              /\ owes' = [owes EXCEPT ![v.slot][r] = 0]
              /\ fin' = [fin EXCEPT ![r] = @ \ {v}]
              /\ UNCHANGED views
    /\ UNCHANGED <<slotSeq, content, wvars, rpc, rnext, rmsg, seen, fails, dpend>>

DropAllowed(r, s) ==
    \/ rpc[r] = "idle" /\ slotSeq[s] < rnext[r]
    \/ rpc[r] = "closing"

(* At a dequeue's start (consumed, unviewed) or at close.  "unlocked": the   *)
(* test (unviewed, owed, consumed) in one step, the store in a later one.   *)
ArenaDropRelease(r, s) ==
    /\ IF dpend[r] = NoSlot
         THEN /\ owes[s][r] = 1
              /\ s \notin ViewedSlots(r)
              /\ DropAllowed(r, s)
              /\ IF ReleaseDesign = "locked"
                   THEN owes' = [owes EXCEPT ![s][r] = 0] /\ UNCHANGED dpend
                   ELSE dpend' = [dpend EXCEPT ![r] = s] /\ UNCHANGED owes
         ELSE /\ dpend[r] = s
              /\ owes' = [owes EXCEPT ![s][r] = 0]
              /\ dpend' = [dpend EXCEPT ![r] = NoSlot]
    /\ UNCHANGED <<slotSeq, content, wvars, rpc, rnext, rmsg, views, seen, fails, fin>>

QueueClose(r) ==
    /\ r \in Closers
    /\ rpc[r] = "idle" /\ dpend[r] = NoSlot
    /\ rpc' = [rpc EXCEPT ![r] = "closing"]
    /\ UNCHANGED <<owes, slotSeq, content, wvars, rnext, rmsg, views, seen, fails, fin, dpend>>

QueueClosed(r) ==  \* the close's sweep is over
    /\ rpc[r] = "closing" /\ dpend[r] = NoSlot
    /\ rpc' = [rpc EXCEPT ![r] = "closed"]
    /\ UNCHANGED <<owes, slotSeq, content, wvars, rnext, rmsg, views, seen, fails, fin, dpend>>

Reader(r) == QueueTake(r) \/ ArenaRebuild(r) \/ QueueDecodeFail(r) \/ QueueClose(r)
             \/ QueueClosed(r) \/ (\E v \in [slot : Slots, m : Msgs] : ArenaRelease(r, v))
             \/ (\E s \in Slots : ArenaDropRelease(r, s))

Finished ==
    /\ wpc = "done"
    /\ \A r \in Readers : \/ rpc[r] = "closed"
                          \/ rpc[r] = "idle" /\ rnext[r] > M
Done == Finished /\ UNCHANGED vars

Next == Writer \/ (\E r \in Readers : Reader(r)) \/ Done

Spec == Init /\ [][Next]_vars

(* Fair: the writer and every reader keep stepping; views die eventually. *)
FairSpec == /\ Spec /\ WF_vars(Writer)
            /\ \A r \in Readers : WF_vars(Reader(r))
            /\ \A r \in Readers : \A s \in Slots : WF_vars(ArenaDropRelease(r, s))
            /\ \A r \in Readers : WF_vars(\E v \in [slot : Slots, m : Msgs] : ArenaRelease(r, v))

(* --- properties ------------------------------------------------------------ *)

TypeOKInv ==
    /\ owes \in [Slots -> [Readers -> {0, 1}]]
    /\ slotSeq \in [Slots -> 0..M] /\ content \in [Slots -> 0..M]
    /\ wpc \in {"begin", "copy", "publish", "done"}
    /\ wslot \in Slots \cup {NoSlot}
    /\ next \in 1..M+1 /\ aborts \in 0..MaxAborts /\ fails \in 0..MaxDecodeFails
    /\ rpc \in [Readers -> {"idle", "rebuild", "closing", "closed"}]
    /\ rnext \in [Readers -> 1..M+1]
    /\ dpend \in [Readers -> Slots \cup {NoSlot}]
    /\ fin \in [Readers -> SUBSET [slot : Slots, m : Msgs]]

(* The writer never writes a slot a reader still views. *)
NoWriteViewedInv ==
    wpc = "copy" => \A r \in Readers : wslot \notin ViewedSlots(r)

(* A view is owed: its reader's byte stays 1 while the view lives. *)
ViewOwedInv == \A r \in Readers : \A v \in views[r] : owes[v.slot][r] = 1

(* Every live view still holds exactly the bytes copied for its message. *)
ViewIntactInv == \A r \in Readers : \A v \in views[r] : content[v.slot] = v.m

(* Every reader received exactly the writer's bytes, in order, no message twice. *)
ExactBytesInv ==
    \A r \in Readers :
        /\ \A i \in 1..Len(seen[r]) : seen[r][i][2] = seen[r][i][1]
        /\ \A i, j \in 1..Len(seen[r]) : i < j => seen[r][i][1] < seen[r][j][1]

(* The writer never waits for a reader: at "begin" it can always step. *)
NeverBlocksInv == wpc = "begin" => ENABLED Writer

(* Eventually every slot is released (readers that never close). *)
EventuallyReleasedProp ==
    <>[](\A s \in Slots : \A r \in Readers : owes[s][r] = 0)
=============================================================================
