------------------------- MODULE MCTensorArenaFork -------------------------
(* TensorArena.tla with a fork() of a reader's process (issue 30: threads   *)
(* and fork).  A child forked from reader r's process inherits r's arena    *)
(* reader as it was: its views (the tensors the parent had received), its   *)
(* owes bytes (one per reader index, in the shared arena: the child's byte  *)
(* r IS the parent's) and its lock (an RLock).  The child drops its copies *)
(* of the tensors (its own references die, or it exits): each base's       *)
(* finalizer runs ArenaReader._release in the child.  LockAtFork says      *)
(* whether another thread of the parent -- a view's finalizer inside its   *)
(* locked step -- held the lock at the fork: that thread does not exist in *)
(* the child.  ForkDesign is what runs at the fork in the child:           *)
(*   "inherit": nothing (the code before): the child's finalizer takes the *)
(*     inherited lock (never released if it was held) and stores the       *)
(*     parent's owes byte = 0;                                             *)
(*   "forget": arena.py's os.register_at_fork hook gives each inherited    *)
(*     reader a fresh lock and marks it inherited: its finalizers, sweeps  *)
(*     and close store nothing.                                            *)
EXTENDS TensorArena

CONSTANTS LockAtFork,  \* "free" | "held"
          ForkDesign   \* "inherit" | "forget"
ASSUME LockAtFork \in {"free", "held"} /\ ForkDesign \in {"inherit", "forget"}

VARIABLES
    cviews,   \* cviews[r]: the views r's forked child inherited, not dropped yet
    cpc       \* cpc[r]: "none" (no child) | "live" | "hung" (blocked on the lock)

forkVars == <<cviews, cpc>>

FInit == Init /\ cviews = [r \in Readers |-> {}] /\ cpc = [r \in Readers |-> "none"]

(* os.fork() in reader r's process: the child inherits r's views. *)
Fork(r) ==
    /\ cpc[r] = "none"
    /\ views[r] # {}
    /\ cviews' = [cviews EXCEPT ![r] = views[r]]
    /\ cpc' = [cpc EXCEPT ![r] = "live"]
    /\ UNCHANGED vars

(* The child drops its copy of view v: the base's finalizer takes the lock *)
(* (blocks for ever if it is the inherited one and was held at the fork)   *)
(* and, inherited, finds v registered (the child's copy of _viewed) and    *)
(* stores owes[v.slot][r] = 0 in the shared arena: the parent's byte; with *)
(* the fork hook, its own lock, and it stores nothing.                     *)
ChildRelease(r, v) ==
    /\ cpc[r] = "live"
    /\ v \in cviews[r]
    /\ IF ForkDesign = "inherit" /\ LockAtFork = "held"
         THEN cpc' = [cpc EXCEPT ![r] = "hung"] /\ UNCHANGED <<cviews, owes>>
         ELSE /\ cviews' = [cviews EXCEPT ![r] = @ \ {v}]
              /\ owes' = IF ForkDesign = "inherit"
                           THEN [owes EXCEPT ![v.slot][r] = 0]
                           ELSE owes
              /\ UNCHANGED cpc
    /\ UNCHANGED <<slotSeq, content, wvars, rvars>>

(* TensorArena's steps, the child's variables unchanged (one definition each, *)
(* so that a counterexample names the step).                                *)
WClaim(s) == ArenaClaim(s) /\ UNCHANGED forkVars
WFallback == ArenaFallback /\ UNCHANGED forkVars
WCopy == ArenaCopy /\ UNCHANGED forkVars
WAbort == QueueAbort /\ UNCHANGED forkVars
WPublish == QueuePublish /\ UNCHANGED forkVars
RTake(r) == QueueTake(r) /\ UNCHANGED forkVars
RRebuild(r) == ArenaRebuild(r) /\ UNCHANGED forkVars
RDecodeFail(r) == QueueDecodeFail(r) /\ UNCHANGED forkVars
RClose(r) == QueueClose(r) /\ UNCHANGED forkVars
RClosed(r) == QueueClosed(r) /\ UNCHANGED forkVars
RRelease(r, v) == ArenaRelease(r, v) /\ UNCHANGED forkVars
RDropRelease(r, s) == ArenaDropRelease(r, s) /\ UNCHANGED forkVars
FDone == Done /\ UNCHANGED forkVars

FNext ==
    \/ \E s \in Slots : WClaim(s)
    \/ WFallback \/ WCopy \/ WAbort \/ WPublish
    \/ \E r \in Readers :
          \/ RTake(r) \/ RRebuild(r) \/ RDecodeFail(r) \/ RClose(r) \/ RClosed(r)
          \/ \E v \in [slot : Slots, m : Msgs] : RRelease(r, v)
          \/ \E s \in Slots : RDropRelease(r, s)
          \/ Fork(r)
          \/ \E v \in [slot : Slots, m : Msgs] : ChildRelease(r, v)
    \/ FDone
FSpec == FInit /\ [][FNext]_<<vars, forkVars>>

(* A forked child never blocks for ever in an arena step. *)
ChildNeverHangsInv == \A r \in Readers : cpc[r] # "hung"
=============================================================================
