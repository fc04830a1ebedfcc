----------------------- MODULE MutReaderSkipOnTimeout -----------------------
(* Mutant: a reader whose poll times out advances its index anyway (it     *)
(* gives up on the chunk instead of polling it again next time).  The      *)
(* correct code raises RingTimeoutError and keeps its index: in the spec a *)
(* timeout is then just a failed poll.  The number of timeouts is bounded  *)
(* by MaxReaderRaises (`raises` counts them).  Expected: a skipped         *)
(* message (DeliveredPrefixInv).                                           *)
EXTENDS MC

MutReaderTimeout(r) ==
    /\ rpc[r] \in {"poll", "poll2"}
    /\ raises < MaxReaderRaises
    /\ raises' = raises + 1
    /\ rindex' = [rindex EXCEPT ![r] = Succ(@)]
    /\ rpc' = [rpc EXCEPT ![r] = "poll"]
    /\ UNCHANGED <<shared, wvars, delivered>>

MutReader(r) == Reader(r) \/ MutReaderTimeout(r)
MutNext == Writer \/ (\E r \in Readers : MutReader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(Writer)
           /\ \A r \in Readers : WF_vars(MutReader(r))
=============================================================================
