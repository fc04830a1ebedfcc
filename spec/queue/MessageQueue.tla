---------------------------- MODULE MessageQueue ----------------------------
(***************************************************************************)
(* The MessageQueue protocol: the ring plus two ZeroMQ channels.           *)
(*                                                                         *)
(* Code: src/verifiedring/queue/ (the `# spec:` comments name the sites).  *)
(*                                                                         *)
(* Composition. RingBuffer.tla proves that the ring gives every local      *)
(* reader each published chunk exactly once, in order, and that the        *)
(* writer publishes chunk n only after every local reader has released     *)
(* chunk n - K.  This module takes that as the ring's interface            *)
(* (released[r], sent, K)                                                  *)
(* and adds what the ring cannot see: the overflow marker and its payload  *)
(* frame on the local XPUB socket, the remote XPUB socket with credit flow *)
(* control, the READY handshake, dequeue timeouts, SHUTDOWN, the local    *)
(* reader's stash, decode failures, failed sends, and a writer broken by a *)
(* failed send or a reader that left telling the others (BROKEN).          *)
(*                                                                         *)
(* Each channel is a FIFO per subscriber (sockQ[r]). A PUB socket drops a  *)
(* frame for a reader that has not subscribed yet (slow joiner) or whose   *)
(* queue holds HWM frames already (high-water mark); a drop is recorded in *)
(* `lost`, which NoLossInv requires to stay empty.                         *)
(*                                                                         *)
(* A frame is <<type, seq, obj>>: READY, a message frame (its sequence    *)
(* number and the object, so that a reused sequence number is visible),   *)
(* an ABORT frame (remote readers, for an aborted run), SHUTDOWN(total) or *)
(* BROKEN(total): the writer broke for good after `total` messages.        *)
(* Objects are numbered by enqueue call; in the code's design object n is  *)
(* message n.                                                              *)
(*                                                                         *)
(* Runs (large_objects="stream", queue/run.py). A message may also travel  *)
(* through the ring as a RUN of chunks, each one ring message:             *)
(* FIRST(s, 0) MORE(s, 1) ... then LAST(s, k) or ABORT(s, k). A ring       *)
(* chunk is <<kind, seq, obj, part>>. A run chunk's content is read from  *)
(* ring chunk (n - 1) % K, so a read after that chunk was released and    *)
(* refilled sees the later one (SlotContent). A local reader holds each   *)
(* run chunk from its read to its release; the message is delivered when  *)
(* its LAST (ok, or DecodeError after a decode failure mid-run) or ABORT   *)
(* (an error) is released. Remote readers get the message frame after the *)
(* LAST, or an ABORT frame after an ABORT.                                 *)
(*                                                                         *)
(* Interrupts (spec/interrupts.md). With MaxInterrupts > 0 an asynchronous *)
(* exception lands where the code records its intent with plain stores and *)
(* the handler or the next call reconciles it: the run writer's cut,       *)
(* catch-up and withdrawal, a claim let go, a cut telling of BROKEN, a     *)
(* local reader's owed outcome. OldWindow puts one window back as the code *)
(* had it before (a mutant).                                               *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    LocalReaders,   \* readers on the writer's host: ring + local socket
    RemoteReaders,  \* readers on other hosts: remote socket only
    K,              \* ring chunks (max_chunks)
    M,              \* ring chunks published, at most, in one behavior (a
                    \*   message is one chunk, or a run of 2 or more)
    LocalHWM,       \* high-water mark of the local XPUB socket, in frames
    RemoteHWM,      \* high-water mark of the remote XPUB socket, in frames
    Window,         \* credits: frames a remote reader may have unacknowledged
    MaxTimeouts,    \* dequeue timeouts the run may contain
    MaxSendFails,   \* failed sends (after a publish) the run may contain
    MaxDecodeFails, \* messages that fail to unpickle at a reader
    WaitSubs,       \* writer waits for every reader's subscription first
    SendReady,      \* writer sends READY after the subscriptions
    ConsumeReady,   \* readers wait for (and consume) READY before dequeuing
    PendingDesign,  \* what a local reader does with an overflow marker:
                    \*  "hold"     keep the ring chunk until the payload frame
                    \*             is in hand; a timeout leaves the chunk held
                    \*  "remember" release the chunk, remember the pending
                    \*             sequence number across a timeout
                    \*  "forget"   release the chunk, forget on timeout (the
                    \*             known trap; a mutant)
    \* Switches for mutants; the code's design is the first value of each.
    SeqCheck,       \* TRUE: a reader raises BrokenPeerError on a sequence
                    \*   number (or frame kind) other than the one it expects
    StashDesign,    \* "stash": frames drained while waiting on the ring are
                    \*   kept in order; "drop": they are discarded
    DecodeAdvances, \* TRUE: a message that fails to decode is consumed
    SendFailDesign, \* "break": a failed send breaks the writer for good;
                    \*   "reuse": the next enqueue reuses the sequence number
    CreditSlack,    \* 0; 1: the credit check lets one frame too many through
    AcksSent,       \* TRUE; FALSE: remote readers never acknowledge
    \* Runs (queue/run.py).
    MaxRunChunks,   \* chunks of one run, at most (0 or 1: no runs, the
                    \*   writer only has inline and overflow)
    MaxAborts,      \* runs whose pickling raises mid-run, at most
    RunReleaseDesign, \* "after": a reader releases a run chunk after it
                    \*   read it; "before": releases it right after its
                    \*   header, then reads its bytes from the ring
    AbortDesign,    \* "abort": pickling raised mid-run -> ABORT chunk (and
                    \*   ABORT frame); "silent": nothing, the next message
    ResyncDesign,   \* "end": after a decode failure mid-run the reader
                    \*   skips to the run's LAST/ABORT, then raises; "next":
                    \*   it raises at once and takes the next chunk as a
                    \*   new message
    BreakDesign,    \* "tell": a broken writer sends BROKEN(total); a local
                    \*   reader that saw it raises once the ring has nothing
                    \*   more; "silent": nothing is sent (the code before);
                    \*   "early": the reader raises as soon as it sees BROKEN
    CutDesign,      \* an interrupt cuts a reader's unpickling of a consumed
                    \*   message: "owe": the next dequeue raises DecodeError
                    \*   for it (a decode failure); "drop": nothing is ever
                    \*   reported for it (the code before)
    InterruptDesign,\* an asynchronous exception right after a publish store:
                    \*   "settle": the publish counts (seq used up, the run's
                    \*   part too; frames still due: broken); "old": the call
                    \*   raises with nothing advanced (the code before);
                    \*   "oldRun": so only for a run's chunks
    \* Interrupts in the steps the code reconciles at the next call
    \* (spec/interrupts.md): each lands where CPython can deliver one, and the
    \* next call (or the handler) finishes or undoes the step.
    MaxInterrupts,  \* such interrupts in a behavior, at most (0: none; two
                    \*   can land in successive calls)
    OldWindow       \* "none": the code's design; else one window as the code
                    \*   had it before (a mutant):
                    \*   "abortFirst": a run cut before its first publish is
                    \*     ended with ABORT(s, 0) where a message starts;
                    \*   "noSettle": the due ABORT of a run whose bookkeeping
                    \*     (part count, end) was cut uses it as it was;
                    \*   "releaseLoses": a reader cut after the decode (at the
                    \*     release's entry) loses the consumed message;
                    \*   "dropOwed": a second interrupt, as the next dequeue
                    \*     pays an owed DecodeError, drops it;
                    \*   "holdClaim": a writer cut at its commit's entry keeps
                    \*     the claimed chunk, and refuses every later call;
                    \*   "tellCut": a writer cut in its telling of BROKEN tells
                    \*     nobody;
                    \*   "frameLost": a local reader cut after the receive of
                    \*     an overflow frame, before it is kept, loses it;
                    \*   "runCutBreaks": a local reader cut as it starts or
                    \*     loads a run breaks for good; "runCutHolds": cut as it
                    \*     starts, it keeps holding the FIRST chunk;
                    \*   "settleLocalOnly": with remote readers, a run cut
                    \*     after its LAST's store is not over: ABORT follows

ASSUME K \in Nat \ {0} /\ M \in Nat \ {0} /\ Window \in Nat \ {0}
ASSUME PendingDesign \in {"hold", "remember", "forget"}
ASSUME StashDesign \in {"stash", "drop"} /\ SendFailDesign \in {"break", "reuse"}
ASSUME MaxRunChunks \in Nat /\ MaxAborts \in Nat
ASSUME RunReleaseDesign \in {"after", "before"} /\ AbortDesign \in {"abort", "silent"}
ASSUME ResyncDesign \in {"end", "next"}
ASSUME BreakDesign \in {"tell", "silent", "early"}
ASSUME InterruptDesign \in {"settle", "old", "oldRun"}
ASSUME CutDesign \in {"owe", "drop"}
ASSUME MaxInterrupts \in Nat
ASSUME OldWindow \in {"none", "abortFirst", "noSettle", "releaseLoses", "dropOwed",
                      "holdClaim", "tellCut", "frameLost", "runCutBreaks",
                      "runCutHolds", "settleLocalOnly"}

Readers == LocalReaders \cup RemoteReaders
HWMOf(r) == IF r \in LocalReaders THEN LocalHWM ELSE RemoteHWM

READY == <<"ready", 0, 0>>
MsgFrame(s, o) == <<"msg", s, o>>
AbortFrame(s, o) == <<"abort", s, o>>
ShutFrame(n) == <<"shut", n, 0>>
BrokeFrame(n) == <<"broke", n, 0>>
\* The writer's last frame: SHUTDOWN or BROKEN.
EndKinds == {"shut", "broke"}

\* Ring chunk kinds: a message starts with one of StartKinds; a run goes on
\* with RunKinds.
StartKinds == {"inline", "overflow", "first"}
RunKinds == {"more", "last", "abort"}
NoChunk == <<0, <<"none", 0, 0, 0>>>>   \* rchunk[r] when nothing is recorded
NoOwed == <<0, "none">>                 \* owed[r] when nothing is owed

VARIABLES
    wpc,        \* writer: "handshake" | "chunk" | "run" (mid-run) | "local"
                \*   | "remote" | "remoteAbort" (an ABORT frame is due)
                \*   | "shut" | "broken" | "told" (broken, BROKEN sent)
    pub,        \* pub[i]: the i-th published ring chunk
                \*   <<kind, seq, obj, part>>: kind "inline" or "overflow"
                \*   (part 0), or a run's "first" (part 0), "more", "last",
                \*   "abort"
    wpart,      \* mid-run: the part number of the run's next chunk
    aborts,     \* runs aborted so far
    nseq,       \* the writer's next sequence number (messages are 1, 2, ...)
    nobj,       \* enqueue calls that have published so far
    released,   \* released[r]: ring chunks local reader r has released
    sockQ,      \* sockQ[r]: frames queued for reader r on its channel
    stash,      \* stash[r]: frames a local reader drained while waiting on
                \*   the ring, in arrival order
    subscribed, \* subscribed[r]: reader r's subscription reached the XPUB
    acked,      \* acked[r]: frames remote reader r has acknowledged
    rpc,        \* reader r: "init" | "ready" | "idle" | "frame" | "closed"
                \*           | "broken" (raised BrokenPeerError: out of place)
                \*           | "told" (raised BrokenPeerError: BROKEN)
                \*   mid-run: "runHeld" (a chunk read, not released yet)
                \*           | "run" (waiting for the next chunk)
                \*           | "runReleased" ("before" only: released, not
                \*             read yet)
    rseq,       \* rseq[r]: the sequence number reader r expects next
    pending,    \* pending[r]: overflow sequence number awaited, 0 if none
    shutTotal,  \* shutTotal[r]: SHUTDOWN's total once r has seen it, else -1
    brokeTotal, \* brokeTotal[r]: BROKEN's total once r has seen it, else -1
    delivered,  \* delivered[r]: what dequeue has returned to reader r:
                \*   <<obj, "ok">>, or <<obj, "error">> (DecodeError)
    rchunk,     \* rchunk[r]: <<n, content>>: the run chunk local reader r
                \*   read last (ring index n, what it read from the ring)
    rfail,      \* rfail[r]: the run being read failed to decode
    lost,       \* frames a PUB socket dropped: <<reader, frame>>
    timeouts,   \* dequeue timeouts so far
    sendFails,  \* failed sends so far
    decodeFails,\* decode failures so far
    wcut,       \* the run writer's bookkeeping: "none" (caught up), or the
                \*   kind of the run chunk whose publish store is out but
                \*   whose part count (and, for LAST/ABORT, the run's end)
                \*   an interrupt cut: RunWriter.settle catches it up
    owed,       \* owed[r]: <<obj, outcome>> a local reader's next dequeue
                \*   returns ("ok") or raises ("error": its DecodeError), state
                \*   OWED (rpc = "owed"); NoOwed if none
    interrupts  \* interrupts (MaxInterrupts) so far

vars == <<wpc, pub, wpart, aborts, nseq, nobj, released, sockQ, stash,
          subscribed, acked, rpc, rseq, pending, shutTotal, brokeTotal,
          delivered, rchunk, rfail, lost, timeouts, sendFails, decodeFails,
          wcut, owed, interrupts>>

sent == Len(pub)
CurObj == nobj + 1   \* the object of the enqueue call in progress

Min(S) == CHOOSE x \in S : \A y \in S : x <= y
\* The ring's interface: chunk n is free once every local reader released n - K.
RingHasRoom ==
    LocalReaders = {} \/ sent - Min({released[r] : r \in LocalReaders}) < K

\* What ring chunk (n - 1) % K holds now (n <= sent): what was published
\* into it last, the highest j <= sent with (j - 1) % K = (n - 1) % K.
SlotContent(n) == pub[n + K * ((sent - n) \div K)]

\* A PUB socket sends frame f to the subscribers among S: queued where
\* subscribed and under the high-water mark, dropped elsewhere.
Publish(S, f) ==
    LET drop == {r \in S : ~subscribed[r] \/ Len(sockQ[r]) >= HWMOf(r)}
    IN  /\ sockQ' = [r \in Readers |->
                        IF r \in S \ drop THEN Append(sockQ[r], f) ELSE sockQ[r]]
        /\ lost' = lost \cup {<<r, f>> : r \in drop}

Init ==
    /\ wpc = "handshake"
    /\ pub = <<>>
    /\ wpart = 0
    /\ aborts = 0
    /\ nseq = 1
    /\ nobj = 0
    /\ released = [r \in LocalReaders |-> 0]
    /\ sockQ = [r \in Readers |-> <<>>]
    /\ stash = [r \in LocalReaders |-> <<>>]
    /\ subscribed = [r \in Readers |-> FALSE]
    /\ acked = [r \in RemoteReaders |-> 0]
    /\ rpc = [r \in Readers |-> "init"]
    /\ rseq = [r \in Readers |-> 1]
    /\ pending = [r \in Readers |-> 0]
    /\ shutTotal = [r \in Readers |-> -1]
    /\ brokeTotal = [r \in Readers |-> -1]
    /\ delivered = [r \in Readers |-> <<>>]
    /\ rchunk = [r \in LocalReaders |-> NoChunk]
    /\ rfail = [r \in LocalReaders |-> FALSE]
    /\ lost = {}
    /\ timeouts = 0
    /\ sendFails = 0
    /\ decodeFails = 0
    /\ wcut = "none"
    /\ owed = [r \in LocalReaders |-> NoOwed]
    /\ interrupts = 0

rvars == <<released, stash, subscribed, acked, rpc, rseq, pending, shutTotal,
           brokeTotal, delivered, rchunk, rfail, timeouts, decodeFails>>
wrun == <<wpart, aborts>>   \* the writer's run state
rrun == <<rchunk, rfail>>   \* a local reader's run state
cuts == <<wcut, owed, interrupts>>   \* the interrupts' records

-----------------------------------------------------------------------------
(* Writer                                                                  *)

\* The enqueue call returns: the sequence number is used up.
Finish == /\ nseq' = nseq + 1
          /\ nobj' = nobj + 1
          /\ wpc' = "chunk"

\* Remote credit: sending message nseq keeps every remote reader within Window.
CreditOK == \A r \in RemoteReaders : nseq - acked[r] <= Window + CreditSlack

\* queue/writer_control.py: WriterControl.handshake (from wait_until_ready)
WriterHandshake ==
    /\ wpc = "handshake"
    /\ WaitSubs => \A r \in Readers : subscribed[r]
    /\ IF SendReady THEN Publish(Readers, READY) ELSE UNCHANGED <<sockQ, lost>>
    /\ wpc' = "chunk"
    /\ UNCHANGED <<pub, nseq, nobj, sendFails, wrun, rvars>>
    /\ UNCHANGED cuts

\* queue/writer_path.py: enqueue -> ring claim (inline object or overflow marker,
\* with its sequence number in the chunk)
WriterPublishChunk ==
    /\ wpc = "chunk"
    /\ sent < M
    /\ RingHasRoom
    /\ \E k \in {"inline", "overflow"} :
          /\ pub' = Append(pub, <<k, nseq, CurObj, 0>>)
          /\ IF k = "overflow" /\ LocalReaders # {}
             THEN wpc' = "local" /\ UNCHANGED <<nseq, nobj>>
             ELSE IF RemoteReaders # {}
             THEN wpc' = "remote" /\ UNCHANGED <<nseq, nobj>>
             ELSE Finish
    /\ UNCHANGED <<sockQ, lost, sendFails, wrun, rvars>>
    /\ UNCHANGED cuts

\* queue/run.py: RunWriter._publish: one chunk of a run (one ring claim and
\* publish; the Pickler's file writes into the claimed chunk). FIRST when the
\* writer is between messages (it starts a run), MORE or LAST mid-run. A run
\* has 2 .. MaxRunChunks chunks, and M bounds ring chunks: FIRST and MORE
\* leave room for the LAST (or ABORT) after them. Runs go to local readers
\* (remote readers get the message frame after the LAST).
WriterPublishRunChunk ==
    /\ MaxRunChunks >= 2
    /\ wpc \in {"chunk", "run"}
    /\ LocalReaders # {}
    /\ RingHasRoom
    /\ \/ /\ wpc = "chunk"
          /\ sent + 2 <= M
          /\ pub' = Append(pub, <<"first", nseq, CurObj, 0>>)
          /\ wpart' = 1
          /\ wpc' = "run"
          /\ UNCHANGED <<nseq, nobj>>
       \/ /\ wpc = "run"
          /\ wpart + 2 <= MaxRunChunks
          /\ sent + 2 <= M
          /\ pub' = Append(pub, <<"more", nseq, CurObj, wpart>>)
          /\ wpart' = wpart + 1
          /\ UNCHANGED <<wpc, nseq, nobj>>
       \/ /\ wpc = "run"
          /\ sent < M
          /\ pub' = Append(pub, <<"last", nseq, CurObj, wpart>>)
          /\ wpart' = 0
          /\ IF RemoteReaders # {}
             THEN wpc' = "remote" /\ UNCHANGED <<nseq, nobj>>
             ELSE Finish
    /\ UNCHANGED <<sockQ, lost, sendFails, aborts, rvars>>
    /\ UNCHANGED cuts

\* queue/run.py: RunWriter.abort: pickling raised mid-run. The writer
\* publishes ABORT(s, next part) (it waits for room) and enqueue raises; s is
\* used up either way. Remote readers get an ABORT frame instead of the
\* message frame ("remoteAbort": WriterSendRemoteFrame, or WriterSendFails).
\* The second disjunct is the ABORT due after an interrupt cut the run
\* ("runCut": CutCalls.abort_run, from the handler or the next call, after
\* RunWriter.settle): it needs no budget. AbortDue: the bookkeeping is caught
\* up (WriterSettleRun) and a part was published (else WriterWithdrawRun);
\* "abortFirst" (the code before): also at part 0; "noSettle" (the code
\* before): the part as the cut left it.
AbortDue ==
    IF OldWindow = "noSettle" THEN wpart > 0
    ELSE IF OldWindow = "abortFirst" THEN wcut = "none"
    ELSE wcut = "none" /\ wpart > 0

WriterAbortRun ==
    \/ /\ wpc = "run"
       /\ aborts < MaxAborts
       /\ aborts' = aborts + 1
       /\ wpart' = 0
       /\ IF AbortDesign = "abort"
          THEN /\ RingHasRoom
               /\ sent < M
               /\ pub' = Append(pub, <<"abort", nseq, CurObj, wpart>>)
               /\ IF RemoteReaders # {}
                  THEN wpc' = "remoteAbort" /\ UNCHANGED <<nseq, nobj>>
                  ELSE Finish
          ELSE \* mutant: nothing is published, the caller goes on with s + 1
               /\ UNCHANGED pub
               /\ Finish
       /\ UNCHANGED <<sockQ, lost, sendFails, rvars>>
       /\ UNCHANGED cuts
    \/ /\ wpc = "runCut"
       /\ AbortDue
       /\ RingHasRoom
       /\ sent < M
       /\ pub' = Append(pub, <<"abort", nseq, CurObj, wpart>>)
       /\ wpart' = 0
       /\ wcut' = "none"
       /\ IF RemoteReaders # {}
          THEN wpc' = "remoteAbort" /\ UNCHANGED <<nseq, nobj>>
          ELSE Finish
       /\ UNCHANGED <<aborts, owed, interrupts, sockQ, lost, sendFails, rvars>>

\* queue/writer_path.py: enqueue -> _send_all, local socket send of the
\* overflow payload frame (after the marker is published)
WriterSendLocalFrame ==
    /\ wpc = "local"
    /\ Publish(LocalReaders, MsgFrame(nseq, CurObj))
    /\ IF RemoteReaders # {} THEN wpc' = "remote" /\ UNCHANGED <<nseq, nobj>>
                             ELSE Finish
    /\ UNCHANGED <<pub, sendFails, wrun, rvars>>
    /\ UNCHANGED cuts

\* queue/writer_path.py: enqueue -> credit, then (_send_all) remote socket send
\* (every object goes to remote readers); after an aborted run, the ABORT
\* frame instead of the message frame.
WriterSendRemoteFrame ==
    /\ wpc \in {"remote", "remoteAbort"}
    /\ CreditOK
    /\ Publish(RemoteReaders, IF wpc = "remote" THEN MsgFrame(nseq, CurObj)
                                               ELSE AbortFrame(nseq, CurObj))
    /\ nseq' = nseq + 1   \* Finish: the call returns
    /\ nobj' = nobj + 1
    /\ wpc' = "chunk"
    /\ UNCHANGED <<pub, sendFails, wrun, rvars>>
    /\ UNCHANGED cuts

\* queue/writer_control.py: WriterControl.send, a send after the publish fails
\* (the XPUB stayed at its mark, NODROP): nothing is queued for anyone, the
\* rest of the call's sends are skipped, and the writer is broken for good
\* (BrokenPeerError now and on every later call, no SHUTDOWN). The
\* sequence number is never reused.
WriterSendFails ==
    /\ wpc \in {"local", "remote", "remoteAbort"}
    /\ wpc \in {"remote", "remoteAbort"} => CreditOK
    /\ sendFails < MaxSendFails
    /\ sendFails' = sendFails + 1
    /\ IF SendFailDesign = "break"
       THEN wpc' = "broken" /\ UNCHANGED <<nseq, nobj>>
       ELSE \* mutant: the caller's next enqueue reuses the sequence number
            /\ wpc' = "chunk"
            /\ nobj' = nobj + 1
            /\ UNCHANGED nseq
    /\ UNCHANGED <<pub, sockQ, lost, wrun, rvars>>
    /\ UNCHANGED cuts

\* queue/writer_cuts.py: published_then_interrupted: an asynchronous exception
\* lands right after a publish store (CPython runs a signal handler at the next
\* call: the rest of publish(), the return to the caller). Nothing a reader can
\* see happens between the store and the exception, so the step is the publish
\* followed by the handler's bookkeeping. "settle" (the code): the chunk is out
\* (WriterCursor.settle), so its sequence number is used up: an inline message
\* with no remote reader is sent; with a frame still due (its overflow frame,
\* the remote one) the writer is broken; mid-run the run moves past the chunk
\* (its part is used; the next call aborts the run). "old": the call raises
\* with nothing advanced, and the caller goes on with its next object. It
\* shares the MaxSendFails budget of writer failures.
OldInterrupt(run) == InterruptDesign = "old" \/ (run /\ InterruptDesign = "oldRun")

InterruptedFinish(framesDue, run) ==
    IF OldInterrupt(run)
    THEN wpc' = "chunk" /\ nobj' = nobj + 1 /\ UNCHANGED nseq
    ELSE IF framesDue THEN wpc' = "broken" /\ UNCHANGED <<nseq, nobj>>
    ELSE Finish

WriterInterruptedAfterPublish ==
    /\ sendFails < MaxSendFails
    /\ sendFails' = sendFails + 1
    /\ RingHasRoom
    /\ \/ /\ wpc = "chunk"
          /\ sent < M
          /\ \E k \in {"inline", "overflow"} :
                /\ pub' = Append(pub, <<k, nseq, CurObj, 0>>)
                /\ InterruptedFinish((k = "overflow" /\ LocalReaders # {})
                                     \/ RemoteReaders # {}, FALSE)
          /\ UNCHANGED wrun
       \/ /\ MaxRunChunks >= 2
          /\ wpc = "run"
          /\ LocalReaders # {}
          /\ \/ /\ wpart + 2 <= MaxRunChunks
                /\ sent + 2 <= M
                /\ pub' = Append(pub, <<"more", nseq, CurObj, wpart>>)
                /\ wpart' = IF OldInterrupt(TRUE) THEN wpart ELSE wpart + 1
                /\ UNCHANGED <<wpc, nseq, nobj>>
             \/ /\ sent < M
                /\ pub' = Append(pub, <<"last", nseq, CurObj, wpart>>)
                /\ wpart' = 0
                /\ InterruptedFinish(RemoteReaders # {}, TRUE)
          /\ UNCHANGED aborts
    /\ UNCHANGED <<sockQ, lost, rvars>>
    /\ UNCHANGED cuts

\* Interrupts the code reconciles (spec/interrupts.md). Each takes one of
\* MaxInterrupts.
CanInterrupt == interrupts < MaxInterrupts /\ interrupts' = interrupts + 1

\* queue/flavors/run/writer.py: RunSender.abort_if_holding: an asynchronous
\* exception lands in a streamed run's call (the enqueue that writes it, or the
\* next call's reconciliation: two interrupts in successive calls). The call
\* raises and the run is cut ("runCut"): its abort (or withdrawal) is due, in
\* the handler or at the next call (close() too). Where it lands:
\*  * while the run's FIRST chunk is claimed and filled, before its publish
\*    store: nothing of the run is out (part 0);
\*  * right after a run chunk's publish store (FIRST, MORE, LAST, or the due
\*    ABORT of a cut run), in its bookkeeping (RunWriter._passed, _end): the
\*    chunk is out, the part count (and the run's end) is not: wcut;
\*  * mid-run while a chunk is filled, or in a reconciliation before its
\*    store: nothing more is out.
WriterInterruptedInRun ==
    /\ MaxRunChunks >= 2
    /\ LocalReaders # {}
    /\ CanInterrupt
    /\ \/ /\ wpc = "chunk"
          /\ sent + 2 <= M
          /\ RingHasRoom
          /\ wpart' = 0
          /\ UNCHANGED <<pub, wcut>>
       \/ /\ RingHasRoom
          /\ \/ /\ wpc = "chunk"
                /\ sent + 2 <= M
                /\ pub' = Append(pub, <<"first", nseq, CurObj, 0>>)
                /\ wpart' = 0
                /\ wcut' = "first"
             \/ /\ wpc = "run"
                /\ wpart + 2 <= MaxRunChunks
                /\ sent + 2 <= M
                /\ pub' = Append(pub, <<"more", nseq, CurObj, wpart>>)
                /\ wcut' = "more"
                /\ UNCHANGED wpart
             \/ /\ wpc = "run"
                /\ sent < M
                /\ pub' = Append(pub, <<"last", nseq, CurObj, wpart>>)
                /\ wcut' = "last"
                /\ UNCHANGED wpart
             \/ /\ wpc = "runCut"
                /\ AbortDue
                /\ sent < M
                /\ pub' = Append(pub, <<"abort", nseq, CurObj, wpart>>)
                /\ wcut' = "abort"
                /\ UNCHANGED wpart
       \/ /\ wpc \in {"run", "runCut"}
          /\ UNCHANGED <<pub, wpart, wcut>>
    /\ wpc' = "runCut"
    /\ UNCHANGED <<nseq, nobj, aborts, owed, sockQ, lost, sendFails, rvars>>

\* queue/flavors/run/writer.py: RunWriter.settle (first in abort_run): the
\* cursor's index moved past the chunk claimed last, so its publish store is
\* out: the run moves past it (the part count); past its LAST or ABORT the run
\* is over and its sequence number used up (no ABORT follows); with remote
\* readers its frame (the message's, or the ABORT's) never went, so the writer
\* is broken (CutCalls.abort_run), as when that send is cut. "noSettle" (the
\* code before): no catch-up; "settleLocalOnly" (the code before): with remote
\* readers a run past its LAST or ABORT is not over: an ABORT follows it.
WriterSettleRun ==
    /\ wpc = "runCut"
    /\ wcut # "none"
    /\ OldWindow # "noSettle"
    /\ wcut' = "none"
    /\ IF wcut \in {"last", "abort"}
          /\ ~(OldWindow = "settleLocalOnly" /\ RemoteReaders # {})
       THEN /\ wpart' = 0
            /\ IF RemoteReaders # {}
               THEN wpc' = "broken" /\ UNCHANGED <<nseq, nobj>>
               ELSE Finish
       ELSE wpart' = wpart + 1 /\ UNCHANGED <<wpc, nseq, nobj>>
    /\ UNCHANGED <<pub, aborts, owed, interrupts, sockQ, lost, sendFails, rvars>>

\* queue/flavors/run/writer.py: RunWriter.withdraw (from abort_run): a run
\* cut before its first publish is withdrawn: its chunk, if still claimed, is
\* let go unpublished, nothing is sent and its sequence number is unused (the
\* next call's message takes it). "abortFirst" (the code before): no
\* withdrawal, the due ABORT goes out with part 0 (WriterAbortRun).
WriterWithdrawRun ==
    /\ wpc = "runCut"
    /\ wpart = 0
    /\ OldWindow # "abortFirst"
    /\ OldWindow # "noSettle" => wcut = "none"
    /\ wpc' = "chunk"
    /\ wcut' = "none"
    /\ UNCHANGED <<pub, wpart, aborts, nseq, nobj, owed, interrupts, sockQ, lost,
                   sendFails, rvars>>

\* queue/transmitters.py: LocalTransmitter.publish_chunk and claim (and
\* commit's handler): an interrupt between a ring claim and its publish store (the
\* fill's return, commit's entry, the encoding): the claimed chunk is let go
\* unpublished, in the handler or by the next call's claim (the ring's
\* WriterAbort): nothing is sent and the sequence number is unused, so the
\* queue's state is as before. "holdClaim" (the code before): the writer keeps
\* holding the chunk ("held") and refuses every later call (MisuseError
\* "already holds chunk"); its close() still tells SHUTDOWN.
WriterInterruptedBeforePublish ==
    /\ wpc = "chunk"
    /\ LocalReaders # {}
    /\ sent < M
    /\ RingHasRoom
    /\ CanInterrupt
    /\ wpc' = IF OldWindow = "holdClaim" THEN "held" ELSE wpc
    /\ UNCHANGED <<pub, nseq, nobj, wcut, owed, sockQ, lost, sendFails, wrun, rvars>>

\* queue/writer_control.py: refuse: an interrupt inside the writer's telling of
\* BROKEN (WriterControl.tell_broken) before its sends: the BROKEN stays owed,
\* and the writer's next call (a refusal) or close() sends it
\* (WriterTellBroken next). "tellCut" (the code before): nobody is told.
WriterInterruptedInTell ==
    /\ wpc = "broken"
    /\ BreakDesign = "tell"
    /\ CanInterrupt
    /\ wpc' = IF OldWindow = "tellCut" THEN "told" ELSE wpc
    /\ UNCHANGED <<pub, nseq, nobj, wcut, owed, sockQ, lost, sendFails, wrun, rvars>>

\* queue/writer_control.py: watch: while the writer waits (for ring room, for
\* credit, mid-run), a reader's connection closed: the writer is broken for
\* good. The model lets it happen in any state after the handshake (a
\* superset); the readers that are left are the model's readers. It shares
\* the budget of failures with WriterSendFails.
WriterReaderLeft ==
    /\ wpc \in {"chunk", "run", "local", "remote", "remoteAbort", "runCut"}
    /\ sendFails < MaxSendFails
    /\ sendFails' = sendFails + 1
    /\ wpc' = "broken"
    /\ UNCHANGED <<pub, nseq, nobj, sockQ, lost, wrun, rvars>>
    /\ UNCHANGED cuts

\* queue/writer_control.py: break_for_good -> tell_broken: BROKEN(total), after every
\* frame sent so far, on both sockets: total = messages the writer completed.
\* "silent" (the code before): nothing is sent.
WriterTellBroken ==
    /\ wpc = "broken"
    /\ BreakDesign # "silent"
    /\ Publish(Readers, BrokeFrame(nseq - 1))
    /\ wpc' = "told"
    /\ UNCHANGED <<pub, nseq, nobj, sendFails, wrun, rvars>>
    /\ UNCHANGED cuts

\* queue/writer_control.py: tell_shutdown (from close()): SHUTDOWN(total) on the
\* local and the remote socket, after the last message; the writer may shut
\* down after any number of messages.
WriterShutdown ==
    /\ wpc \in {"chunk", "held"}
    /\ Publish(Readers, ShutFrame(nseq - 1))
    /\ wpc' = "shut"
    /\ UNCHANGED <<pub, nseq, nobj, sendFails, wrun, rvars>>
    /\ UNCHANGED cuts

-----------------------------------------------------------------------------
(* Readers                                                                 *)

\* Unpickle object o: it fails at most MaxDecodeFails times in the run (an
\* interrupt that cuts the unpickling is such a failure: the code raises the
\* interrupt and the DecodeError at the next dequeue, the delivery here). The
\* message is consumed (sequence number advanced) either way; the caller
\* gets the object or DecodeError. "drop" (mutant): a cut message is consumed
\* and nothing is delivered for it.
Deliver(r, o) ==
    \E ok \in IF decodeFails < MaxDecodeFails THEN BOOLEAN ELSE {TRUE} :
        \E dropped \in IF ~ok /\ CutDesign = "drop" THEN BOOLEAN ELSE {FALSE} :
        /\ delivered' = IF dropped THEN delivered
                        ELSE [delivered EXCEPT ![r] =
                                 Append(@, <<o, IF ok THEN "ok" ELSE "error">>)]
        /\ decodeFails' = IF ok THEN decodeFails ELSE decodeFails + 1
        /\ rseq' = [rseq EXCEPT ![r] = IF ok \/ DecodeAdvances THEN @ + 1 ELSE @]

\* The frame is the message the reader expects (the sequence check).
FrameOK(f, s) == ~SeqCheck \/ (f[1] = "msg" /\ f[2] = s)
\* ... for a remote reader, the message or its ABORT frame.
RemoteFrameOK(f, s) == ~SeqCheck \/ (f[1] \in {"msg", "abort"} /\ f[2] = s)

\* queue/reader.py: subscribe (connect + subscribe)
ReaderSubscribe(r) ==
    /\ rpc[r] = "init"
    /\ subscribed' = [subscribed EXCEPT ![r] = TRUE]
    /\ rpc' = [rpc EXCEPT ![r] = IF ConsumeReady THEN "ready" ELSE "idle"]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, sockQ, stash,
                   acked, rseq, pending, shutTotal, brokeTotal, delivered, lost, timeouts,
                   sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/reader_path.py: ReaderPath.await_ready (from wait_until_ready)
ReaderAwaitReady(r) ==
    /\ rpc[r] = "ready"
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r]) = READY
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, stash,
                   subscribed, acked, rseq, pending, shutTotal, brokeTotal, delivered,
                   lost, timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* Unpickling chunk c's bytes may fail (at most MaxDecodeFails in the
\* behavior), once per run: after a failure the rest of the run is only
\* taken and released. An ABORT chunk carries no bytes.
FailChoices(r, c) ==
    IF c[1] \in {"first", "more", "last"} /\ ~rfail[r]
       /\ decodeFails < MaxDecodeFails
    THEN BOOLEAN ELSE {FALSE}

\* queue/local_path.py: dequeue -> ring acquire_read of the next chunk; its
\* sequence number must be the expected one (a run's MORE, LAST or ABORT
\* where a message starts is BrokenPeerError too). Inline: consumed, decoded
\* and released. Overflow marker: the reader now needs that frame ("hold"
\* keeps the chunk until then). FIRST: the reader now reads the run; it
\* holds the FIRST chunk (ReaderReleaseRunChunk releases it) while its
\* bytes are unpickled (which may fail). The sequence number is consumed
\* when the run's LAST or ABORT is released (with the delivery).
ReaderTakeChunk(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "idle"
    /\ pending[r] = 0
    /\ released[r] < sent
    /\ LET c == pub[released[r] + 1] IN
       IF (SeqCheck /\ c[2] # rseq[r]) \/ c[1] \in RunKinds
       THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
            /\ released' = [released EXCEPT ![r] = @ + 1]
            /\ UNCHANGED <<pending, rseq, delivered, rrun, decodeFails>>
       ELSE IF c[1] = "inline"
       THEN /\ Deliver(r, c[3])
            /\ released' = [released EXCEPT ![r] = @ + 1]
            /\ UNCHANGED <<rpc, pending, rrun>>
       ELSE IF c[1] = "first"
       THEN \E f \in FailChoices(r, c) :
               /\ rchunk' = [rchunk EXCEPT ![r] = <<released[r] + 1, c>>]
               /\ rfail' = [rfail EXCEPT ![r] = f]
               /\ decodeFails' = IF f THEN decodeFails + 1 ELSE decodeFails
               /\ rpc' = [rpc EXCEPT ![r] = "runHeld"]
               /\ UNCHANGED <<released, pending, rseq, delivered>>
       ELSE /\ pending' = [pending EXCEPT ![r] = c[2]]
            /\ rpc' = [rpc EXCEPT ![r] = "frame"]
            /\ released' = IF PendingDesign = "hold" THEN released
                           ELSE [released EXCEPT ![r] = @ + 1]
            /\ UNCHANGED <<rseq, delivered, rrun, decodeFails>>
    /\ UNCHANGED <<wpc, pub, wrun, nseq, nobj, sockQ, stash, subscribed, acked,
                   shutTotal, brokeTotal, lost, timeouts, sendFails>>
    /\ UNCHANGED cuts

\* The chunk a run reader read next is the run's: MORE, LAST or ABORT with
\* the run's sequence number and the part after the previous chunk's.
RunChunkOK(r, c) ==
    /\ c[1] \in RunKinds
    /\ SeqCheck => (c[2] = rseq[r] /\ c[4] = rchunk[r][2][4] + 1)

\* Run chunk c (ring index n) has been read and released; failed: the run
\* failed to decode so far; rec: what the reader read from the ring (kept in
\* rchunk). LAST: the object is delivered (DecodeError if failed); ABORT:
\* MessageAbortedError (a DecodeError); either consumes the sequence number
\* and ends the run. MORE (or FIRST): the run goes on, unless the run failed
\* and ResyncDesign = "next" (mutant: raise at once).
RunChunkDone(r, n, c, failed, rec) ==
    IF c[1] \in {"last", "abort"} \/ (failed /\ ResyncDesign = "next")
    THEN LET ok == c[1] = "last" /\ ~failed IN
         /\ delivered' = [delivered EXCEPT ![r] =
                             Append(@, <<c[3], IF ok THEN "ok" ELSE "error">>)]
         /\ rseq' = [rseq EXCEPT ![r] = IF ok \/ DecodeAdvances THEN @ + 1 ELSE @]
         /\ rpc' = [rpc EXCEPT ![r] = "idle"]
         \* "after": the read was checked in the state after it; "before":
         \* the read is this step's, recorded for RunIntactInv
         /\ rchunk' = [rchunk EXCEPT ![r] =
                          IF RunReleaseDesign = "after" THEN NoChunk
                                                        ELSE <<n, rec>>]
         /\ rfail' = [rfail EXCEPT ![r] = FALSE]
    ELSE /\ rpc' = [rpc EXCEPT ![r] = "run"]
         /\ rchunk' = [rchunk EXCEPT ![r] = <<n, rec>>]
         /\ rfail' = [rfail EXCEPT ![r] = failed]
         /\ UNCHANGED <<delivered, rseq>>

\* queue/run.py: RunReader._next: the run's next ring chunk, n: wait until it
\* is published (acquire_read), read its header and bytes from the ring.
\* Not the run's next chunk: BrokenPeerError (out of order). Its bytes may
\* fail to unpickle. The chunk is held (ReaderReleaseRunChunk next).
\* "before" (mutant): ReaderReleaseRunChunk read the header and released the
\* chunk; its bytes are read now from the ring, where the writer may have
\* refilled in between; the read ends the chunk.
ReaderReadRunChunk(r) ==
    /\ r \in LocalReaders
    /\ IF RunReleaseDesign = "after"
       THEN rpc[r] = "run" /\ released[r] < sent
       ELSE rpc[r] = "runReleased"
    /\ IF RunReleaseDesign = "after"
       THEN LET n == released[r] + 1
                c == SlotContent(n)
            IN  IF ~RunChunkOK(r, c)
                THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
                     /\ rchunk' = [rchunk EXCEPT ![r] = <<n, c>>]
                     /\ UNCHANGED <<rseq, delivered, rfail, decodeFails>>
                ELSE \E f \in FailChoices(r, c) :
                       /\ decodeFails' = IF f THEN decodeFails + 1 ELSE decodeFails
                       /\ rchunk' = [rchunk EXCEPT ![r] = <<n, c>>]
                       /\ rfail' = [rfail EXCEPT ![r] = @ \/ f]
                       /\ rpc' = [rpc EXCEPT ![r] = "runHeld"]
                       /\ UNCHANGED <<rseq, delivered>>
       ELSE LET n == rchunk[r][1]
                h == rchunk[r][2]     \* the header, read before the release
                b == SlotContent(n)   \* the bytes, read now
            IN  \E f \in FailChoices(r, h) :
                  /\ decodeFails' = IF f THEN decodeFails + 1 ELSE decodeFails
                  /\ RunChunkDone(r, n, <<h[1], h[2], b[3], h[4]>>,
                                   rfail[r] \/ f, b)
    /\ UNCHANGED <<wpc, pub, wrun, nseq, nobj, released, sockQ, stash,
                   subscribed, acked, pending, shutTotal, brokeTotal, lost, timeouts,
                   sendFails>>
    /\ UNCHANGED cuts

\* queue/run.py: RunReader._release: release the held run chunk (its read
\* flag) once its bytes are consumed (copied out by the unpickler); the
\* FIRST chunk too. LAST: the object is delivered; ABORT: an error; MORE:
\* back to reading. "before" (mutant): the next chunk is taken (it must be
\* published), its header read and checked, and the chunk released at once,
\* before its bytes are read (ReaderReadRunChunk).
ReaderReleaseRunChunk(r) ==
    /\ r \in LocalReaders
    /\ \/ rpc[r] = "runHeld"
       \/ RunReleaseDesign = "before" /\ rpc[r] = "run" /\ released[r] < sent
    /\ released' = [released EXCEPT ![r] = @ + 1]
    /\ IF rpc[r] = "runHeld"
       THEN RunChunkDone(r, rchunk[r][1], rchunk[r][2], rfail[r], rchunk[r][2])
       ELSE LET n == released[r] + 1
                c == SlotContent(n)   \* not released yet: intact
            IN  /\ rpc' = [rpc EXCEPT ![r] =
                              IF RunChunkOK(r, c) THEN "runReleased" ELSE "broken"]
                /\ rchunk' = [rchunk EXCEPT ![r] = <<n, c>>]
                /\ UNCHANGED <<rseq, delivered, rfail>>
    /\ UNCHANGED <<wpc, pub, wrun, nseq, nobj, sockQ, stash, subscribed, acked,
                   pending, shutTotal, brokeTotal, lost, timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/local_path.py: LocalPath.take, the owed record: an
\* interrupt lands in a local reader's dequeue (spec/interrupts.md):
\*  * after the take of an inline chunk consumed its message (the sequence
\*    number moved before the decode): in the unpickling, its DecodeError is
\*    owed ("error", outcomes: ReaderOutcomes.failed); after the decode (the release's entry,
\*    the return path), the object is owed ("ok"). The chunk is released (in
\*    the handler, or by the next call). "releaseLoses" (the code before): cut
\*    after the decode, the message is consumed and nothing is owed;
\*  * in the next dequeue as it pays what is owed (a second interrupt in
\*    successive calls): there is no call between the record's clear and the
\*    return or raise, so it lands before the clear: still owed. "dropOwed"
\*    (the code before): an owed DecodeError is dropped;
\*  * after the receive of the pending marker's frame (from the stash or the
\*    socket), before it is kept (flavors/overflow.py, the receive's mark):
\*    the frame is lost, the gap is reported as that message's DecodeError
\*    (owed) and the next message delivered. "frameLost" (the code before):
\*    the reader goes on waiting for the lost frame;
\*  * as it starts a run (the take of its FIRST) or in its load (a chunk's
\*    read or release): the run counts as cut from before its sequence number
\*    moves (flavors/run/reader.py, RunReceiver): the next dequeue skips the
\*    run's rest and reports it (DecodeError: the model's failed run, rfail).
\*    "runCutBreaks" (the code before): the reader breaks for good;
\*    "runCutHolds" (the code before): cut as it starts, it keeps holding the
\*    FIRST chunk ("runStuck"): every later dequeue raises MisuseError, and
\*    the writer stalls on that chunk.
ReaderInterrupted(r) ==
    /\ r \in LocalReaders
    /\ CanInterrupt
    /\ \/ /\ rpc[r] = "idle"
          /\ pending[r] = 0
          /\ released[r] < sent
          /\ LET c == pub[released[r] + 1] IN
             /\ c[1] = "inline"
             /\ c[2] = rseq[r]
             /\ released' = [released EXCEPT ![r] = @ + 1]
             /\ rseq' = [rseq EXCEPT ![r] = @ + 1]
             /\ \E out \in {"ok", "error"} :
                   IF OldWindow = "releaseLoses" /\ out = "ok"
                   THEN UNCHANGED <<rpc, owed>>
                   ELSE /\ owed' = [owed EXCEPT ![r] = <<c[3], out>>]
                        /\ rpc' = [rpc EXCEPT ![r] = "owed"]
          /\ UNCHANGED <<sockQ, stash, pending, rrun>>
       \/ /\ rpc[r] = "owed"
          /\ UNCHANGED <<released, rseq, sockQ, stash, pending, rrun>>
          /\ IF OldWindow = "dropOwed" /\ owed[r][2] = "error"
             THEN /\ owed' = [owed EXCEPT ![r] = NoOwed]
                  /\ rpc' = [rpc EXCEPT ![r] = "idle"]
             ELSE UNCHANGED <<rpc, owed>>
       \/ /\ rpc[r] = "frame"
          /\ stash[r] # <<>> \/ (sockQ[r] # <<>> /\ Head(sockQ[r])[1] # "broke")
          /\ LET fromStash == stash[r] # <<>>
                 f == IF fromStash THEN Head(stash[r]) ELSE Head(sockQ[r])
             IN  /\ FrameOK(f, pending[r])
                 /\ stash' = IF fromStash THEN [stash EXCEPT ![r] = Tail(@)] ELSE stash
                 /\ sockQ' = IF fromStash THEN sockQ ELSE [sockQ EXCEPT ![r] = Tail(@)]
                 /\ IF OldWindow = "frameLost"
                    THEN UNCHANGED <<rpc, owed, pending, rseq, released>>
                    ELSE /\ owed' = [owed EXCEPT ![r] = <<f[3], "error">>]
                         /\ rpc' = [rpc EXCEPT ![r] = "owed"]
                         /\ pending' = [pending EXCEPT ![r] = 0]
                         /\ rseq' = [rseq EXCEPT ![r] = @ + 1]
                         /\ released' = IF PendingDesign = "hold"
                                        THEN [released EXCEPT ![r] = @ + 1] ELSE released
          /\ UNCHANGED rrun
       \/ /\ rpc[r] = "idle"
          /\ pending[r] = 0
          /\ released[r] < sent
          /\ pub[released[r] + 1][1] = "first"
          /\ pub[released[r] + 1][2] = rseq[r]
          /\ IF OldWindow = "runCutBreaks"
             THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
                  /\ UNCHANGED rrun
             ELSE /\ rchunk' = [rchunk EXCEPT ![r] = <<released[r] + 1, pub[released[r] + 1]>>]
                  /\ rfail' = [rfail EXCEPT ![r] = OldWindow # "runCutHolds"]
                  /\ rpc' = [rpc EXCEPT ![r] =
                                 IF OldWindow = "runCutHolds" THEN "runStuck" ELSE "runHeld"]
          /\ UNCHANGED <<owed, released, rseq, sockQ, stash, pending>>
       \/ /\ rpc[r] \in {"run", "runHeld"}
          /\ IF OldWindow = "runCutBreaks"
             THEN rpc' = [rpc EXCEPT ![r] = "broken"] /\ UNCHANGED rfail
             ELSE rfail' = [rfail EXCEPT ![r] = TRUE] /\ UNCHANGED rpc
          /\ UNCHANGED <<owed, released, rseq, sockQ, stash, pending, rchunk>>
    /\ UNCHANGED <<wpc, pub, wrun, wcut, nseq, nobj, subscribed,
                   acked, shutTotal, brokeTotal, delivered, lost, timeouts,
                   sendFails, decodeFails>>

\* queue/outcomes.py: ReaderOutcomes.pay_owed (the next dequeue, state OWED): the owed
\* object is returned, or the owed DecodeError raised; the record is cleared
\* with no call between the clear and the return or raise.
ReaderPayOwed(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "owed"
    /\ delivered' = [delivered EXCEPT ![r] = Append(@, owed[r])]
    /\ owed' = [owed EXCEPT ![r] = NoOwed]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<wpc, pub, wrun, wcut, rrun, nseq, nobj, released, sockQ, stash,
                   subscribed, acked, rseq, pending, shutTotal, brokeTotal, lost,
                   timeouts, sendFails, decodeFails, interrupts>>

\* queue/flavors/overflow.py: FrameReceiver.take: the stash first, in arrival order,
\* else the local socket; the frame must carry the pending sequence number.
\* "hold" releases the chunk only now.
ReaderRecvFrame(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "frame"
    /\ stash[r] # <<>> \/ (sockQ[r] # <<>> /\ Head(sockQ[r])[1] # "broke")
    /\ LET fromStash == stash[r] # <<>>
           f == IF fromStash THEN Head(stash[r]) ELSE Head(sockQ[r])
       IN  /\ stash' = IF fromStash THEN [stash EXCEPT ![r] = Tail(@)] ELSE stash
           /\ sockQ' = IF fromStash THEN sockQ ELSE [sockQ EXCEPT ![r] = Tail(@)]
           /\ IF ~FrameOK(f, pending[r])
              THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
                   /\ UNCHANGED <<released, pending, rseq, delivered,
                                  decodeFails>>
              ELSE /\ Deliver(r, f[3])
                   /\ released' = IF PendingDesign = "hold"
                                  THEN [released EXCEPT ![r] = @ + 1] ELSE released
                   /\ pending' = [pending EXCEPT ![r] = 0]
                   /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, subscribed, acked,
                   shutTotal, brokeTotal, lost, timeouts, sendFails>>
    /\ UNCHANGED cuts

\* queue/flavors/overflow.py: FrameReceiver.take raises RingTimeoutError while the
\* payload frame has not arrived (the stash is empty; self._pending is kept);
\* the caller may call dequeue again.
ReaderTimeout(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "frame"
    /\ stash[r] = <<>>
    /\ timeouts < MaxTimeouts
    /\ timeouts' = timeouts + 1
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ pending' = IF PendingDesign = "remember" THEN pending
                  ELSE [pending EXCEPT ![r] = 0]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, sockQ, stash,
                   subscribed, acked, rseq, shutTotal, brokeTotal, delivered, lost,
                   sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/local_path.py: dequeue after a timeout ("remember"):
\* the retry goes straight back to the pending frame.
ReaderResume(r) ==
    /\ rpc[r] = "idle"
    /\ pending[r] # 0
    /\ rpc' = [rpc EXCEPT ![r] = "frame"]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, sockQ, stash,
                   subscribed, acked, rseq, pending, shutTotal, brokeTotal, delivered,
                   lost, timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/local_path.py: _ring_or_shutdown, a frame (not SHUTDOWN) drained
\* from the socket while the reader waits on the ring is stashed. The code
\* drains only after a failed ring poll, which may be arbitrarily old: the
\* model lets a reader between messages drain at any time (a superset); a
\* run's wait for its next chunk drains too (run/receiver.py: _watch_run).
Draining(r) ==
    /\ r \in LocalReaders
    /\ \/ rpc[r] = "idle" /\ pending[r] = 0
       \/ rpc[r] = "run"
    /\ sockQ[r] # <<>>

ReaderStash(r) ==
    /\ Draining(r)
    /\ Head(sockQ[r])[1] \notin EndKinds
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ stash' = IF StashDesign = "stash"
                THEN [stash EXCEPT ![r] = Append(@, Head(sockQ[r]))] ELSE stash
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, subscribed,
                   acked, rpc, rseq, pending, shutTotal, brokeTotal, delivered, lost,
                   timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/local_path.py: _ring_or_shutdown, SHUTDOWN drained from the socket
\* while the reader waits on the ring: its total is noted.
ReaderSeeShutdown(r) ==
    /\ Draining(r)
    /\ Head(sockQ[r])[1] = "shut"
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ shutTotal' = [shutTotal EXCEPT ![r] = Head(sockQ[r])[2]]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, stash,
                   subscribed, acked, rpc, rseq, pending, brokeTotal, delivered,
                   lost, timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/reader_path.py: _saw_shutdown raises ClosedError (for good) once the
\* reader has received all `total` messages; a local reader only from its
\* ring wait, so every published chunk is taken first.
ReaderClose(r) ==
    /\ rpc[r] = "idle"
    /\ pending[r] = 0
    /\ shutTotal[r] >= 0
    /\ rseq[r] - 1 >= shutTotal[r]
    /\ r \in LocalReaders => released[r] = sent
    /\ rpc' = [rpc EXCEPT ![r] = "closed"]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, sockQ, stash,
                   subscribed, acked, rseq, pending, shutTotal, brokeTotal, delivered,
                   lost, timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/remote_path.py: take: receive the next frame, check its sequence
\* number, consume, acknowledge (returns one credit), decode. An ABORT frame
\* for the expected sequence number: consumed and acknowledged, the caller
\* gets MessageAbortedError (a DecodeError) for it.
RemoteRecvFrame(r) ==
    /\ r \in RemoteReaders
    /\ rpc[r] = "idle"
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r])[1] \notin EndKinds
    /\ LET f == Head(sockQ[r]) IN
       /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
       /\ IF ~RemoteFrameOK(f, rseq[r])
          THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
               /\ UNCHANGED <<acked, rseq, delivered, decodeFails>>
          ELSE /\ IF f[1] = "abort"
                  THEN /\ delivered' = [delivered EXCEPT ![r] =
                                            Append(@, <<f[3], "error">>)]
                       /\ rseq' = [rseq EXCEPT ![r] =
                                       IF DecodeAdvances THEN @ + 1 ELSE @]
                       /\ UNCHANGED decodeFails
                  ELSE Deliver(r, f[3])
               /\ acked' = IF AcksSent THEN [acked EXCEPT ![r] = @ + 1] ELSE acked
               /\ UNCHANGED rpc
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, stash,
                   subscribed, pending, shutTotal, brokeTotal, lost, timeouts, sendFails>>
    /\ UNCHANGED cuts

\* queue/remote_path.py: take receives SHUTDOWN: its total is noted; a
\* total above what was received means messages were lost (BrokenPeerError).
\* The code also acknowledges its received count here (for the writer's
\* close(), which waits for it before its process may exit: not modeled);
\* RemoteRecvFrame already counts every frame as acknowledged (a superset).
RemoteSeeShutdown(r) ==
    /\ r \in RemoteReaders
    /\ rpc[r] = "idle"
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r])[1] = "shut"
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ shutTotal' = [shutTotal EXCEPT ![r] = Head(sockQ[r])[2]]
    /\ rpc' = IF SeqCheck /\ rseq[r] - 1 < Head(sockQ[r])[2]
              THEN [rpc EXCEPT ![r] = "broken"] ELSE rpc
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, stash,
                   subscribed, acked, rseq, pending, brokeTotal, delivered, lost,
                   timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/flavors/control.py: note_broken: BROKEN drained from the local
\* socket while the reader waits on the ring or mid-run, or received where
\* the pending marker's frame would be (the stash is taken first): its total
\* is noted.
ReaderSeeBroken(r) ==
    /\ \/ Draining(r)
       \/ r \in LocalReaders /\ rpc[r] = "frame" /\ stash[r] = <<>> /\ sockQ[r] # <<>>
    /\ Head(sockQ[r])[1] = "broke"
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ brokeTotal' = [brokeTotal EXCEPT ![r] = Head(sockQ[r])[2]]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, stash,
                   subscribed, acked, rpc, rseq, pending, shutTotal, delivered,
                   lost, timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/flavors/overflow.py: _tell: BROKEN was noted and the ring has
\* nothing more (polled again after the note: a chunk published before
\* BROKEN was sent is taken first), so nothing else can come: between
\* messages, mid-run, or where the pending frame would be (the stash is
\* empty). BrokenPeerError with the writer's reason, for good. "early"
\* (mutant): raise at the note, without polling the ring again.
RingDrained(r) == BreakDesign = "tell" => released[r] = sent

ReaderTold(r) ==
    /\ r \in LocalReaders
    /\ brokeTotal[r] >= 0
    /\ \/ rpc[r] = "idle" /\ pending[r] = 0 /\ RingDrained(r)
       \/ rpc[r] = "run" /\ RingDrained(r)
       \/ rpc[r] = "frame" /\ stash[r] = <<>>
    /\ rpc' = [rpc EXCEPT ![r] = "told"]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, sockQ, stash,
                   subscribed, acked, rseq, pending, shutTotal, brokeTotal,
                   delivered, lost, timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

\* queue/remote_path.py: _end_of_stream: BROKEN in the remote frame stream
\* (after every frame sent before it): BrokenPeerError, for good.
RemoteSeeBroken(r) ==
    /\ r \in RemoteReaders
    /\ rpc[r] = "idle"
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r])[1] = "broke"
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ brokeTotal' = [brokeTotal EXCEPT ![r] = Head(sockQ[r])[2]]
    /\ rpc' = [rpc EXCEPT ![r] = "told"]
    /\ UNCHANGED <<wpc, pub, wrun, rrun, nseq, nobj, released, stash,
                   subscribed, acked, rseq, pending, shutTotal, delivered, lost,
                   timeouts, sendFails, decodeFails>>
    /\ UNCHANGED cuts

-----------------------------------------------------------------------------
\* The writer shut down and every reader raised ClosedError.
AllClosed ==
    /\ wpc = "shut"
    /\ \A r \in Readers : rpc[r] = "closed"

\* The writer broke, told its readers, and every reader raised BrokenPeerError.
AllTold ==
    /\ wpc = "told"
    /\ \A r \in Readers : rpc[r] = "told"

\* The bounded run is over (every reader closed, or every reader was told
\* the writer broke): stutter, so that any other state with no enabled
\* action is reported by TLC as a deadlock (a hang). "silent": readers wait
\* for ever once the writer broke (what TLC reports for it).
Done == (AllClosed \/ AllTold) /\ UNCHANGED vars

ReaderStep(r) ==
    \/ ReaderSubscribe(r) \/ ReaderAwaitReady(r) \/ ReaderTakeChunk(r)
    \/ ReaderReadRunChunk(r) \/ ReaderReleaseRunChunk(r)
    \/ ReaderRecvFrame(r) \/ ReaderTimeout(r) \/ ReaderResume(r)
    \/ ReaderStash(r) \/ ReaderSeeShutdown(r) \/ ReaderClose(r)
    \/ RemoteRecvFrame(r) \/ RemoteSeeShutdown(r)
    \/ ReaderSeeBroken(r) \/ ReaderTold(r) \/ RemoteSeeBroken(r)
    \/ ReaderInterrupted(r) \/ ReaderPayOwed(r)

WriterStep ==
    \/ WriterHandshake \/ WriterPublishChunk \/ WriterPublishRunChunk
    \/ WriterAbortRun \/ WriterSendLocalFrame
    \/ WriterSendRemoteFrame \/ WriterSendFails \/ WriterShutdown
    \/ WriterReaderLeft \/ WriterTellBroken \/ WriterInterruptedAfterPublish
    \/ WriterInterruptedInRun \/ WriterSettleRun \/ WriterWithdrawRun
    \/ WriterInterruptedBeforePublish \/ WriterInterruptedInTell

Next == WriterStep \/ (\E r \in Readers : ReaderStep(r)) \/ Done

Spec == Init /\ [][Next]_vars /\ WF_vars(WriterStep)
                             /\ \A r \in Readers : WF_vars(ReaderStep(r))

-----------------------------------------------------------------------------
(* Properties                                                              *)

\* A frame: READY, MsgFrame(s, o), AbortFrame(s, o) or ShutFrame(n). (A
\* predicate, not the set of all frames: TraceMessageQueue instantiates this
\* module, and TLC then evaluates such a set anew in every state.)
IsFrame(f) ==
    \/ f = READY
    \/ f[1] \in {"msg", "abort"} /\ f[2] \in 1..M /\ f[3] \in 1..M
    \/ f[1] \in EndKinds /\ f[2] \in 0..M /\ f[3] = 0

\* A ring chunk: <<kind, seq, obj, part>>.
Chunks == (StartKinds \cup RunKinds) \X (1..M) \X (1..M) \X (0..M)

TypeOKInv ==
    /\ wpc \in {"handshake", "chunk", "run", "local", "remote", "remoteAbort",
               "shut", "broken", "told", "runCut", "held"}
    /\ sent \in 0..M
    /\ \A i \in 1..sent : pub[i] \in Chunks
    /\ wpart \in 0..M
    /\ aborts \in 0..MaxAborts
    /\ nseq \in 1..M + 1
    /\ released \in [LocalReaders -> 0..M]
    /\ acked \in [RemoteReaders -> 0..M]
    /\ rpc \in [Readers -> {"init", "ready", "idle", "frame", "closed", "broken",
                            "told", "run", "runHeld", "runReleased", "owed",
                            "runStuck"}]
    /\ DOMAIN rchunk = LocalReaders   \* (cheaper for TLC than a function set)
    /\ \A r \in LocalReaders :
          rchunk[r] = NoChunk \/ (rchunk[r][1] \in 1..M /\ rchunk[r][2] \in Chunks)
    /\ rfail \in [LocalReaders -> BOOLEAN]
    /\ pending \in [Readers -> 0..M]
    /\ shutTotal \in [Readers -> -1..M]
    /\ brokeTotal \in [Readers -> -1..M]
    /\ \A r \in Readers : \A i \in 1..Len(sockQ[r]) : IsFrame(sockQ[r][i])
    /\ timeouts \in 0..MaxTimeouts
    /\ sendFails \in 0..MaxSendFails
    /\ decodeFails \in 0..MaxDecodeFails
    /\ wcut \in {"none", "first", "more", "last", "abort"}
    /\ \A r \in LocalReaders :
          owed[r] = NoOwed \/ (owed[r][1] \in 1..M /\ owed[r][2] \in {"ok", "error"})
    /\ interrupts \in 0..MaxInterrupts

\* Every run chunk a local reader read (the last one is recorded in
\* rchunk, checked in the state after each read) is the chunk published at
\* that ring index: its ring chunk was not refilled before the read.
RunIntactInv ==
    \A r \in LocalReaders :
        rchunk[r] # NoChunk => rchunk[r][2] = pub[rchunk[r][1]]

\* The object the writer published first with sequence number s (0: none).
ObjOf(s) ==
    LET P == {i \in 1..sent : pub[i][2] = s}
    IN  IF P = {} THEN 0 ELSE pub[Min(P)][3]

\* Each reader's i-th delivery (an object or a DecodeError) is the object
\* published with sequence number i: no loss, no duplicate, no reorder and no
\* second object under one sequence number, across both channels, timeouts,
\* retries and decode failures.
DeliveredPrefixInv ==
    \A r \in Readers : \A i \in 1..Len(delivered[r]) :
        /\ ObjOf(i) # 0
        /\ delivered[r][i][1] = ObjOf(i)

\* Each delivery's outcome agrees with what the writer did: a message whose
\* run it aborted is delivered as an error (MessageAbortedError), on every
\* path (the ring's ABORT, the remote ABORT frame), never as an object.
WriterAborted(s) == \E i \in 1..sent : pub[i][1] = "abort" /\ pub[i][2] = s

OutcomeInv ==
    \A r \in Readers : \A i \in 1..Len(delivered[r]) :
        WriterAborted(i) => delivered[r][i][2] = "error"

\* No PUB socket ever drops a frame (slow joiner or high-water mark).
NoLossInv == lost = {}

\* No reader ever sees a sequence number or frame kind other than the one it
\* expects (it would raise BrokenPeerError).
NoOutOfOrderInv == \A r \in Readers : rpc[r] # "broken"

\* The writer never keeps a claimed chunk between calls: it never refuses a
\* call with MisuseError "already holds chunk" ("held").
NoMisuseInv == wpc # "held"

\* A reader raises ClosedError only after it has received every message the
\* writer sent (SHUTDOWN's total).
ClosedAfterAllInv ==
    \A r \in Readers : rpc[r] = "closed" =>
        /\ wpc = "shut"
        /\ shutTotal[r] = nseq - 1
        /\ Len(delivered[r]) = nseq - 1

\* A reader raises BrokenPeerError for the writer's BROKEN only after it has
\* received every message the writer completed (BROKEN's total).
ToldAfterAllInv ==
    \A r \in Readers : rpc[r] = "told" =>
        /\ wpc = "told"
        /\ brokeTotal[r] = nseq - 1
        /\ Len(delivered[r]) >= nseq - 1

\* Every reader receives all messages and then ClosedError or -- the writer
\* broke -- BrokenPeerError: no reader waits for ever.
AllDoneProp == <>(AllClosed \/ AllTold)
=============================================================================
