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
(* control, the READY handshake, and dequeue timeouts.                     *)
(*                                                                         *)
(* Each channel is a FIFO per subscriber (sockQ[r]). A PUB socket drops a  *)
(* frame for a reader that has not subscribed yet (slow joiner) or whose   *)
(* queue holds HWM frames already (high-water mark); a drop is recorded in *)
(* `lost`, which NoLossInv requires to stay empty.                         *)
(*                                                                         *)
(* Frames carry the message's sequence number; 0 is READY.                 *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    LocalReaders,   \* readers on the writer's host: ring + local socket
    RemoteReaders,  \* readers on other hosts: remote socket only
    K,              \* ring chunks (max_chunks)
    M,              \* messages the writer sends in one run
    LocalHWM,       \* high-water mark of the local XPUB socket, in frames
    RemoteHWM,      \* high-water mark of the remote XPUB socket, in frames
    Window,         \* credits: frames a remote reader may have unacknowledged
    MaxTimeouts,    \* dequeue timeouts the run may contain
    WaitSubs,       \* writer waits for every reader's subscription first
    SendReady,      \* writer sends READY after the subscriptions
    ConsumeReady,   \* readers wait for (and consume) READY before dequeuing
    PendingDesign   \* what a local reader does with an overflow marker:
                    \*  "hold"     keep the ring chunk until the payload frame
                    \*             is in hand; a timeout leaves the chunk held
                    \*  "remember" release the chunk, remember the pending
                    \*             sequence number across a timeout
                    \*  "forget"   release the chunk, forget on timeout (the
                    \*             known trap; a mutant)

ASSUME K \in Nat \ {0} /\ M \in Nat \ {0} /\ Window \in Nat \ {0}
ASSUME PendingDesign \in {"hold", "remember", "forget"}

Readers == LocalReaders \cup RemoteReaders
READY == 0
Msgs == 1..M
HWMOf(r) == IF r \in LocalReaders THEN LocalHWM ELSE RemoteHWM

VARIABLES
    wpc,        \* writer: "handshake" | "chunk" | "local" | "remote"
    sent,       \* messages whose ring chunk the writer has published
    kind,       \* kind[m]: "inline" or "overflow" (chosen at publish)
    released,   \* released[r]: ring chunks local reader r has released
    sockQ,      \* sockQ[r]: frames queued for reader r on its channel
    subscribed, \* subscribed[r]: reader r's subscription reached the XPUB
    acked,      \* acked[r]: frames remote reader r has acknowledged
    rpc,        \* reader r: "init" | "ready" | "idle" | "frame"
    pending,    \* pending[r]: overflow sequence number awaited, 0 if none
    delivered,  \* delivered[r]: what dequeue has returned to reader r
    lost,       \* frames a PUB socket dropped: <<reader, seq>>
    timeouts    \* dequeue timeouts so far

vars == <<wpc, sent, kind, released, sockQ, subscribed, acked, rpc, pending,
          delivered, lost, timeouts>>

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
    /\ sent = 0
    /\ kind = [m \in Msgs |-> "inline"]
    /\ released = [r \in LocalReaders |-> 0]
    /\ sockQ = [r \in Readers |-> <<>>]
    /\ subscribed = [r \in Readers |-> FALSE]
    /\ acked = [r \in RemoteReaders |-> 0]
    /\ rpc = [r \in Readers |-> "init"]
    /\ pending = [r \in Readers |-> 0]
    /\ delivered = [r \in Readers |-> <<>>]
    /\ lost = {}
    /\ timeouts = 0

-----------------------------------------------------------------------------
(* Writer                                                                  *)

\* queue/writer.py: wait_until_ready (writer side)
WriterHandshake ==
    /\ wpc = "handshake"
    /\ WaitSubs => \A r \in Readers : subscribed[r]
    /\ IF SendReady THEN Publish(Readers, READY) ELSE UNCHANGED <<sockQ, lost>>
    /\ wpc' = "chunk"
    /\ UNCHANGED <<sent, kind, released, subscribed, acked, rpc, pending,
                   delivered, timeouts>>

\* queue/writer.py: enqueue -> ring acquire_write (inline
\* object or overflow marker with its sequence number in the chunk)
WriterPublishChunk ==
    /\ wpc = "chunk"
    /\ sent < M
    /\ RingHasRoom
    /\ \E k \in {"inline", "overflow"} :
          /\ kind' = [kind EXCEPT ![sent + 1] = k]
          /\ wpc' = IF k = "overflow" /\ LocalReaders # {} THEN "local"
                    ELSE IF RemoteReaders # {} THEN "remote" ELSE "chunk"
    /\ sent' = sent + 1
    /\ UNCHANGED <<released, sockQ, subscribed, acked, rpc, pending, delivered,
                   lost, timeouts>>

\* queue/writer.py: enqueue -> _send_all, local socket send of the
\* overflow payload frame (after the marker is published)
WriterSendLocalFrame ==
    /\ wpc = "local"
    /\ Publish(LocalReaders, sent)
    /\ wpc' = IF RemoteReaders # {} THEN "remote" ELSE "chunk"
    /\ UNCHANGED <<sent, kind, released, subscribed, acked, rpc, pending,
                   delivered, timeouts>>

\* queue/writer.py: enqueue -> wait for credits, then (_send_all) remote
\* socket send (every object goes to remote readers)
WriterSendRemoteFrame ==
    /\ wpc = "remote"
    /\ \A r \in RemoteReaders : sent - acked[r] <= Window
    /\ Publish(RemoteReaders, sent)
    /\ wpc' = "chunk"
    /\ UNCHANGED <<sent, kind, released, subscribed, acked, rpc, pending,
                   delivered, timeouts>>

-----------------------------------------------------------------------------
(* Readers                                                                 *)

\* queue/reader.py: _subscribe (connect + subscribe)
ReaderSubscribe(r) ==
    /\ rpc[r] = "init"
    /\ subscribed' = [subscribed EXCEPT ![r] = TRUE]
    /\ rpc' = [rpc EXCEPT ![r] = IF ConsumeReady THEN "ready" ELSE "idle"]
    /\ UNCHANGED <<wpc, sent, kind, released, sockQ, acked, pending, delivered,
                   lost, timeouts>>

\* queue/reader.py: wait_until_ready (reader side)
ReaderAwaitReady(r) ==
    /\ rpc[r] = "ready"
    /\ sockQ[r] # <<>>
    /\ Head(sockQ[r]) = READY
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<wpc, sent, kind, released, subscribed, acked, pending,
                   delivered, lost, timeouts>>

\* queue/local_reader.py: dequeue -> ring acquire_read of the
\* next chunk. Inline: the object is returned and the chunk released. Overflow
\* marker: the reader now needs frame m ("hold" keeps the chunk until then).
ReaderTakeChunk(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "idle"
    /\ pending[r] = 0
    /\ released[r] < sent
    /\ LET m == released[r] + 1 IN
       IF kind[m] = "inline"
       THEN /\ delivered' = [delivered EXCEPT ![r] = Append(@, m)]
            /\ released' = [released EXCEPT ![r] = m]
            /\ UNCHANGED <<rpc, pending>>
       ELSE /\ pending' = [pending EXCEPT ![r] = m]
            /\ rpc' = [rpc EXCEPT ![r] = "frame"]
            /\ released' = IF PendingDesign = "hold" THEN released
                           ELSE [released EXCEPT ![r] = m]
            /\ UNCHANGED delivered
    /\ UNCHANGED <<wpc, sent, kind, sockQ, subscribed, acked, lost, timeouts>>

\* queue/local_reader.py: _take_frame, the local socket receive of
\* the overflow payload; "hold" releases the chunk only now.
ReaderRecvFrame(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "frame"
    /\ sockQ[r] # <<>>
    /\ delivered' = [delivered EXCEPT ![r] = Append(@, Head(sockQ[r]))]
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ released' = IF PendingDesign = "hold"
                   THEN [released EXCEPT ![r] = pending[r]] ELSE released
    /\ pending' = [pending EXCEPT ![r] = 0]
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ UNCHANGED <<wpc, sent, kind, subscribed, acked, lost, timeouts>>

\* queue/local_reader.py: _take_frame raises RingTimeoutError while
\* the payload frame has not arrived (self._pending is kept); the caller may call dequeue again.
ReaderTimeout(r) ==
    /\ r \in LocalReaders
    /\ rpc[r] = "frame"
    /\ timeouts < MaxTimeouts
    /\ timeouts' = timeouts + 1
    /\ rpc' = [rpc EXCEPT ![r] = "idle"]
    /\ pending' = IF PendingDesign = "remember" THEN pending
                  ELSE [pending EXCEPT ![r] = 0]
    /\ UNCHANGED <<wpc, sent, kind, released, sockQ, subscribed, acked,
                   delivered, lost>>

\* queue/local_reader.py: dequeue after a timeout ("remember"):
\* the retry goes straight back to the pending frame.
ReaderResume(r) ==
    /\ rpc[r] = "idle"
    /\ pending[r] # 0
    /\ rpc' = [rpc EXCEPT ![r] = "frame"]
    /\ UNCHANGED <<wpc, sent, kind, released, sockQ, subscribed, acked, pending,
                   delivered, lost, timeouts>>

\* queue/remote_reader.py: dequeue (verify, consume, ack): receive the
\* next frame, verify it, acknowledge it (returns one credit).
RemoteRecvFrame(r) ==
    /\ r \in RemoteReaders
    /\ rpc[r] = "idle"
    /\ sockQ[r] # <<>>
    /\ delivered' = [delivered EXCEPT ![r] = Append(@, Head(sockQ[r]))]
    /\ sockQ' = [sockQ EXCEPT ![r] = Tail(@)]
    /\ acked' = [acked EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<wpc, sent, kind, released, subscribed, rpc, pending, lost,
                   timeouts>>

-----------------------------------------------------------------------------
AllDone ==
    /\ wpc = "chunk" /\ sent = M
    /\ \A r \in Readers : Len(delivered[r]) = M

\* The bounded run is over: stutter, so that any other state with no
\* enabled action is reported by TLC as a deadlock (a hang).
Done == AllDone /\ UNCHANGED vars

ReaderStep(r) ==
    \/ ReaderSubscribe(r) \/ ReaderAwaitReady(r) \/ ReaderTakeChunk(r)
    \/ ReaderRecvFrame(r) \/ ReaderTimeout(r) \/ ReaderResume(r)
    \/ RemoteRecvFrame(r)

WriterStep ==
    WriterHandshake \/ WriterPublishChunk \/ WriterSendLocalFrame \/ WriterSendRemoteFrame

Next == WriterStep \/ (\E r \in Readers : ReaderStep(r)) \/ Done

Spec == Init /\ [][Next]_vars /\ WF_vars(WriterStep)
                             /\ \A r \in Readers : WF_vars(ReaderStep(r))

-----------------------------------------------------------------------------
(* Properties                                                              *)

TypeOKInv ==
    /\ wpc \in {"handshake", "chunk", "local", "remote"}
    /\ sent \in 0..M
    /\ released \in [LocalReaders -> 0..M]
    /\ acked \in [RemoteReaders -> 0..M]
    /\ rpc \in [Readers -> {"init", "ready", "idle", "frame"}]
    /\ pending \in [Readers -> 0..M]
    /\ timeouts \in 0..MaxTimeouts

\* Each reader's delivered sequence is a prefix of the sent sequence
\* 1, 2, ..., sent, across both channels, timeouts and retries included.
DeliveredPrefixInv ==
    \A r \in Readers :
        /\ Len(delivered[r]) <= sent
        /\ \A i \in 1..Len(delivered[r]) : delivered[r][i] = i

\* No PUB socket ever drops a frame (slow joiner or high-water mark).
NoLossInv == lost = {}

AllDoneProp == <>AllDone
=============================================================================
