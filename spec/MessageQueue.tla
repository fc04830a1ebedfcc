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
(* reader's stash, decode failures and failed sends.                       *)
(*                                                                         *)
(* Each channel is a FIFO per subscriber (sockQ[r]). A PUB socket drops a  *)
(* frame for a reader that has not subscribed yet (slow joiner) or whose   *)
(* queue holds HWM frames already (high-water mark); a drop is recorded in *)
(* `lost`, which NoLossInv requires to stay empty.                         *)
(*                                                                         *)
(* A frame is <<type, seq, obj>>: READY, a message frame (its sequence    *)
(* number and the object, so that a reused sequence number is visible),   *)
(* or SHUTDOWN(total). Objects are numbered by enqueue call; in the        *)
(* code's design object n is message n.                                    *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    LocalReaders,   \* readers on the writer's host: ring + local socket
    RemoteReaders,  \* readers on other hosts: remote socket only
    K,              \* ring chunks (max_chunks)
    M,              \* enqueue calls that publish, at most, in one run
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
    AcksSent        \* TRUE; FALSE: remote readers never acknowledge

ASSUME K \in Nat \ {0} /\ M \in Nat \ {0} /\ Window \in Nat \ {0}
ASSUME PendingDesign \in {"hold", "remember", "forget"}
ASSUME StashDesign \in {"stash", "drop"} /\ SendFailDesign \in {"break", "reuse"}

Readers == LocalReaders \cup RemoteReaders
HWMOf(r) == IF r \in LocalReaders THEN LocalHWM ELSE RemoteHWM

READY == <<"ready", 0, 0>>
MsgFrame(s, o) == <<"msg", s, o>>
ShutFrame(n) == <<"shut", n, 0>>

VARIABLES
    wpc,        \* writer: "handshake" | "chunk" | "local" | "remote"
                \*         | "shut" | "broken"
    pub,        \* pub[i]: the i-th published ring chunk <<kind, seq, obj>>
                \*   (kind "inline" or "overflow", chosen at publish)
    nseq,       \* the writer's next sequence number (messages are 1, 2, ...)
    nobj,       \* enqueue calls that have published so far
    released,   \* released[r]: ring chunks local reader r has released
    sockQ,      \* sockQ[r]: frames queued for reader r on its channel
    stash,      \* stash[r]: frames a local reader drained while waiting on
                \*   the ring, in arrival order
    subscribed, \* subscribed[r]: reader r's subscription reached the XPUB
    acked,      \* acked[r]: frames remote reader r has acknowledged
    rpc,        \* reader r: "init" | "ready" | "idle" | "frame" | "closed"
                \*           | "broken" (raised BrokenPeerError)
    rseq,       \* rseq[r]: the sequence number reader r expects next
    pending,    \* pending[r]: overflow sequence number awaited, 0 if none
    shutTotal,  \* shutTotal[r]: SHUTDOWN's total once r has seen it, else -1
    delivered,  \* delivered[r]: what dequeue has returned to reader r:
                \*   <<obj, "ok">>, or <<obj, "error">> (DecodeError)
    lost,       \* frames a PUB socket dropped: <<reader, frame>>
    timeouts,   \* dequeue timeouts so far
    sendFails,  \* failed sends so far
    decodeFails \* decode failures so far

vars == <<wpc, pub, nseq, nobj, released, sockQ, stash, subscribed, acked, rpc,
          rseq, pending, shutTotal, delivered, lost, timeouts, sendFails,
          decodeFails>>

sent == Len(pub)
CurObj == nobj + 1   \* the object of the enqueue call in progress

Min(S) == CHOOSE x \in S : \A y \in S : x <= y
\* The ring's interface: chunk n is free once every local reader released n - K.
RingHasRoom ==
    LocalReaders = {} \/ sent - Min({released[r] : r \in LocalReaders}) < K

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
    /\ delivered = [r \in Readers |-> <<>>]
    /\ lost = {}
    /\ timeouts = 0
    /\ sendFails = 0
    /\ decodeFails = 0

rvars == <<released, stash, subscribed, acked, rpc, rseq, pending, shutTotal,
           delivered, timeouts, decodeFails>>

-----------------------------------------------------------------------------
(* Writer                                                                  *)

\* The enqueue call returns: the sequence number is used up.
Finish == /\ nseq' = nseq + 1
          /\ nobj' = nobj + 1
          /\ wpc' = "chunk"

\* Remote credit: sending message nseq keeps every remote reader within Window.
CreditOK == \A r \in RemoteReaders : nseq - acked[r] <= Window + CreditSlack

\* queue/writer.py: QueueWriter._handshake (from wait_until_ready)
WriterHandshake ==
    /\ wpc = "handshake"
    /\ WaitSubs => \A r \in Readers : subscribed[r]
    /\ IF SendReady THEN Publish(Readers, READY) ELSE UNCHANGED <<sockQ, lost>>
    /\ wpc' = "chunk"
    /\ UNCHANGED <<pub, nseq, nobj, sendFails, rvars>>

\* queue/writer.py: enqueue -> ring claim (inline object or overflow marker,
\* with its sequence number in the chunk)
WriterPublishChunk ==
    /\ wpc = "chunk"
    /\ sent < M
    /\ RingHasRoom
    /\ \E k \in {"inline", "overflow"} :
          /\ pub' = Append(pub, <<k, nseq, CurObj>>)
          /\ IF k = "overflow" /\ LocalReaders # {}
             THEN wpc' = "local" /\ UNCHANGED <<nseq, nobj>>
             ELSE IF RemoteReaders # {}
             THEN wpc' = "remote" /\ UNCHANGED <<nseq, nobj>>
             ELSE Finish
    /\ UNCHANGED <<sockQ, lost, sendFails, rvars>>

\* queue/writer.py: enqueue -> _send_all, local socket send of the
\* overflow payload frame (after the marker is published)
WriterSendLocalFrame ==
    /\ wpc = "local"
    /\ Publish(LocalReaders, MsgFrame(nseq, CurObj))
    /\ IF RemoteReaders # {} THEN wpc' = "remote" /\ UNCHANGED <<nseq, nobj>>
                             ELSE Finish
    /\ UNCHANGED <<pub, sendFails, rvars>>

\* queue/writer.py: enqueue -> credit, then (_send_all) remote socket send
\* (every object goes to remote readers)
WriterSendRemoteFrame ==
    /\ wpc = "remote"
    /\ CreditOK
    /\ Publish(RemoteReaders, MsgFrame(nseq, CurObj))
    /\ nseq' = nseq + 1   \* Finish: the call returns
    /\ nobj' = nobj + 1
    /\ wpc' = "chunk"
    /\ UNCHANGED <<pub, sendFails, rvars>>

\* queue/writer.py: _send_all, a send after the publish fails (the XPUB
\* stayed at its mark, NODROP): nothing is queued for anyone, the rest of
\* the call's sends are skipped, and the writer is broken for good
\* (BrokenPeerError now and on every later call, no SHUTDOWN). The
\* sequence number is never reused.
WriterSendFails ==
    /\ wpc \in {"local", "remote"}
    /\ wpc = "remote" => CreditOK
    /\ sendFails < MaxSendFails
    /\ sendFails' = sendFails + 1
    /\ IF SendFailDesign = "break"
       THEN wpc' = "broken" /\ UNCHANGED <<nseq, nobj>>
       ELSE \* mutant: the caller's next enqueue reuses the sequence number
            /\ wpc' = "chunk"
            /\ nobj' = nobj + 1
            /\ UNCHANGED nseq
    /\ UNCHANGED <<pub, sockQ, lost, rvars>>

\* queue/writer.py: shutdown (also from close()): SHUTDOWN(total) on the
\* local and the remote socket, after the last message; the writer may shut
\* down after any number of messages.
WriterShutdown ==
    /\ wpc = "chunk"
    /\ Publish(Readers, ShutFrame(nseq - 1))
    /\ wpc' = "shut"
    /\ UNCHANGED <<pub, nseq, nobj, sendFails, rvars>>

-----------------------------------------------------------------------------
(* Readers                                                                 *)

\* Unpickle object o: it fails at most MaxDecodeFails times in the run. The
\* message is consumed (sequence number advanced) either way; the caller
\* gets the object or DecodeError.
Deliver(r, o) ==
    \E ok \in IF decodeFails < MaxDecodeFails THEN BOOLEAN ELSE {TRUE} :
        /\ delivered' = [delivered EXCEPT ![r] =
                            Append(@, <<o, IF ok THEN "ok" ELSE "error">>)]
        /\ decodeFails' = IF ok THEN decodeFails ELSE decodeFails + 1
        /\ rseq' = [rseq EXCEPT ![r] = IF ok \/ DecodeAdvances THEN @ + 1 ELSE @]

\* The frame is the message the reader expects (the sequence check).
FrameOK(f, s) == ~SeqCheck \/ (f[1] = "msg" /\ f[2] = s)

\* queue/reader.py: _subscribe (connect + subscribe)
ReaderSubscribe(r) ==
    /\ rpc[r] = "init"
    /\ subscribed' = [subscribed EXCEPT ![r] = TRUE]
    /\ rpc' = [rpc EXCEPT ![r] = IF ConsumeReady THEN "ready" ELSE "idle"]
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, sockQ, stash, acked, rseq,
                   pending, shutTotal, delivered, lost, timeouts, sendFails,
                   decodeFails>>

\* queue/reader.py: QueueReader._handshake (from wait_until_ready)
ReaderAwaitReady(r) ==
    /\ rpc[r] = "ready"
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r]) = READY
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, stash, subscribed, acked,
                   rseq, pending, shutTotal, delivered, lost, timeouts,
                   sendFails, decodeFails>>

\* queue/local_reader.py: dequeue -> ring acquire_read of the next chunk; its
\* sequence number must be the expected one. Inline: consumed, decoded and
\* released. Overflow marker: the reader now needs that frame ("hold" keeps
\* the chunk until then).
ReaderTakeChunk(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "idle"
    /\ pending[r] = 0
    /\ released[r] < sent
    /\ LET c == pub[released[r] + 1] IN
       IF SeqCheck /\ c[2] # rseq[r]
       THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
            /\ released' = [released EXCEPT ![r] = @ + 1]
            /\ UNCHANGED <<pending, rseq, delivered, decodeFails>>
       ELSE IF c[1] = "inline"
       THEN /\ Deliver(r, c[3])
            /\ released' = [released EXCEPT ![r] = @ + 1]
            /\ UNCHANGED <<rpc, pending>>
       ELSE /\ pending' = [pending EXCEPT ![r] = c[2]]
            /\ rpc' = [rpc EXCEPT ![r] = "frame"]
            /\ released' = IF PendingDesign = "hold" THEN released
                           ELSE [released EXCEPT ![r] = @ + 1]
            /\ UNCHANGED <<rseq, delivered, decodeFails>>
    /\ UNCHANGED <<wpc, pub, nseq, nobj, sockQ, stash, subscribed, acked,
                   shutTotal, lost, timeouts, sendFails>>

\* queue/local_reader.py: _take_frame: the stash first, in arrival order,
\* else the local socket; the frame must carry the pending sequence number.
\* "hold" releases the chunk only now.
ReaderRecvFrame(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "frame"
    /\ stash[r] # <<>> \/ sockQ[r] # <<>>
    /\ LET fromStash == stash[r] # <<>>
           f == IF fromStash THEN Head(stash[r]) ELSE Head(sockQ[r])
       IN  /\ stash' = IF fromStash THEN [stash EXCEPT ![r] = Tail(@)] ELSE stash
           /\ sockQ' = IF fromStash THEN sockQ ELSE [sockQ EXCEPT ![r] = Tail(@)]
           /\ IF ~FrameOK(f, pending[r])
              THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
                   /\ UNCHANGED <<released, pending, rseq, delivered, decodeFails>>
              ELSE /\ Deliver(r, f[3])
                   /\ released' = IF PendingDesign = "hold"
                                  THEN [released EXCEPT ![r] = @ + 1] ELSE released
                   /\ pending' = [pending EXCEPT ![r] = 0]
                   /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<wpc, pub, nseq, nobj, subscribed, acked, shutTotal, lost,
                   timeouts, sendFails>>

\* queue/local_reader.py: _take_frame raises RingTimeoutError while the
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
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, sockQ, stash, subscribed,
                   acked, rseq, shutTotal, delivered, lost, sendFails,
                   decodeFails>>

\* queue/local_reader.py: dequeue after a timeout ("remember"):
\* the retry goes straight back to the pending frame.
ReaderResume(r) ==
    /\ rpc[r] = "idle"
    /\ pending[r] # 0
    /\ rpc' = [rpc EXCEPT ![r] = "frame"]
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, sockQ, stash, subscribed,
                   acked, rseq, pending, shutTotal, delivered, lost, timeouts,
                   sendFails, decodeFails>>

\* queue/local_reader.py: _ring_or_shutdown, a frame (not SHUTDOWN) drained
\* from the socket while the reader waits on the ring is stashed. The code
\* drains only after a failed ring poll, which may be arbitrarily old: the
\* model lets a reader between messages drain at any time (a superset).
ReaderStash(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "idle"
    /\ pending[r] = 0
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r])[1] # "shut"
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ stash' = IF StashDesign = "stash"
                THEN [stash EXCEPT ![r] = Append(@, Head(sockQ[r]))] ELSE stash
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, subscribed, acked, rpc, rseq,
                   pending, shutTotal, delivered, lost, timeouts, sendFails,
                   decodeFails>>

\* queue/local_reader.py: _ring_or_shutdown, SHUTDOWN drained from the socket
\* while the reader waits on the ring: its total is noted.
ReaderSeeShutdown(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "idle"
    /\ pending[r] = 0
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r])[1] = "shut"
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ shutTotal' = [shutTotal EXCEPT ![r] = Head(sockQ[r])[2]]
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, stash, subscribed, acked,
                   rpc, rseq, pending, delivered, lost, timeouts, sendFails,
                   decodeFails>>

\* queue/reader.py: _saw_shutdown raises ClosedError (for good) once the
\* reader has received all `total` messages; a local reader only from its
\* ring wait, so every published chunk is taken first.
ReaderClose(r) ==
    /\ rpc[r] = "idle"
    /\ pending[r] = 0
    /\ shutTotal[r] >= 0
    /\ rseq[r] - 1 >= shutTotal[r]
    /\ r \in LocalReaders => released[r] = sent
    /\ rpc' = [rpc EXCEPT ![r] = "closed"]
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, sockQ, stash, subscribed,
                   acked, rseq, pending, shutTotal, delivered, lost, timeouts,
                   sendFails, decodeFails>>

\* queue/remote_reader.py: dequeue: receive the next frame, check its sequence
\* number, consume, acknowledge (returns one credit), decode.
RemoteRecvFrame(r) ==
    /\ r \in RemoteReaders
    /\ rpc[r] = "idle"
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r])[1] # "shut"
    /\ LET f == Head(sockQ[r]) IN
       /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
       /\ IF ~FrameOK(f, rseq[r])
          THEN /\ rpc' = [rpc EXCEPT ![r] = "broken"]
               /\ UNCHANGED <<acked, rseq, delivered, decodeFails>>
          ELSE /\ Deliver(r, f[3])
               /\ acked' = IF AcksSent THEN [acked EXCEPT ![r] = @ + 1] ELSE acked
               /\ UNCHANGED rpc
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, stash, subscribed, pending,
                   shutTotal, lost, timeouts, sendFails>>

\* queue/remote_reader.py: dequeue receives SHUTDOWN: its total is noted; a
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
    /\ UNCHANGED <<wpc, pub, nseq, nobj, released, stash, subscribed, acked,
                   rseq, pending, delivered, lost, timeouts, sendFails,
                   decodeFails>>

-----------------------------------------------------------------------------
\* The writer shut down and every reader raised ClosedError.
AllClosed ==
    /\ wpc = "shut"
    /\ \A r \in Readers : rpc[r] = "closed"

\* The bounded run is over (every reader closed, or the writer broke: its
\* readers are never told, see README): stutter, so that any other state
\* with no enabled action is reported by TLC as a deadlock (a hang).
Done == (AllClosed \/ wpc = "broken") /\ UNCHANGED vars

ReaderStep(r) ==
    \/ ReaderSubscribe(r) \/ ReaderAwaitReady(r) \/ ReaderTakeChunk(r)
    \/ ReaderRecvFrame(r) \/ ReaderTimeout(r) \/ ReaderResume(r)
    \/ ReaderStash(r) \/ ReaderSeeShutdown(r) \/ ReaderClose(r)
    \/ RemoteRecvFrame(r) \/ RemoteSeeShutdown(r)

WriterStep ==
    \/ WriterHandshake \/ WriterPublishChunk \/ WriterSendLocalFrame
    \/ WriterSendRemoteFrame \/ WriterSendFails \/ WriterShutdown

Next == WriterStep \/ (\E r \in Readers : ReaderStep(r)) \/ Done

Spec == Init /\ [][Next]_vars /\ WF_vars(WriterStep)
                             /\ \A r \in Readers : WF_vars(ReaderStep(r))

-----------------------------------------------------------------------------
(* Properties                                                              *)

Frames == {READY} \cup {MsgFrame(s, o) : s \in 1..M, o \in 1..M}
                  \cup {ShutFrame(n) : n \in 0..M}

TypeOKInv ==
    /\ wpc \in {"handshake", "chunk", "local", "remote", "shut", "broken"}
    /\ sent \in 0..M
    /\ nseq \in 1..M + 1
    /\ released \in [LocalReaders -> 0..M]
    /\ acked \in [RemoteReaders -> 0..M]
    /\ rpc \in [Readers -> {"init", "ready", "idle", "frame", "closed", "broken"}]
    /\ pending \in [Readers -> 0..M]
    /\ shutTotal \in [Readers -> -1..M]
    /\ \A r \in Readers : \A i \in 1..Len(sockQ[r]) : sockQ[r][i] \in Frames
    /\ timeouts \in 0..MaxTimeouts
    /\ sendFails \in 0..MaxSendFails
    /\ decodeFails \in 0..MaxDecodeFails

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

\* No PUB socket ever drops a frame (slow joiner or high-water mark).
NoLossInv == lost = {}

\* No reader ever sees a sequence number or frame kind other than the one it
\* expects (it would raise BrokenPeerError).
NoOutOfOrderInv == \A r \in Readers : rpc[r] # "broken"

\* A reader raises ClosedError only after it has received every message the
\* writer sent (SHUTDOWN's total).
ClosedAfterAllInv ==
    \A r \in Readers : rpc[r] = "closed" =>
        /\ wpc = "shut"
        /\ shutTotal[r] = nseq - 1
        /\ Len(delivered[r]) = nseq - 1

\* Every reader receives all messages and then ClosedError, unless the
\* writer broke.
AllDoneProp == <>(AllClosed \/ wpc = "broken")
=============================================================================
