"""The error taxonomy of verifiedring: one base class, four kinds.

Every message names the rule that was broken and the values that broke it,
so a log line alone tells an operator which process, reader and chunk is
involved and what was expected.

* :class:`MisuseError` -- the caller broke an API rule (bad geometry, wrong
  role, index out of range, a message too large). Nothing shared was touched.
* :class:`RingTimeoutError` -- a bounded wait ran out; the ring stays usable
  and the same call may be retried.
* :class:`ClosedError` -- the channel was closed or shut down by its writer.
* :class:`BrokenPeerError` -- a peer's state cannot be trusted: a segment is
  gone or has the wrong size, a frame failed authentication, a worker raised.
"""

from __future__ import annotations


class VerifiedRingError(Exception):
    """Base class of every error raised by verifiedring."""


class MisuseError(VerifiedRingError, ValueError):
    """An API rule was broken by the caller; shared state is unchanged."""


class RingTimeoutError(VerifiedRingError, TimeoutError):
    """A bounded wait ran out before its condition held; retrying is safe."""


class ClosedError(VerifiedRingError):
    """The channel is closed, or its writer sent shutdown."""


class BrokenPeerError(VerifiedRingError):
    """A peer or the shared segment is in a state that cannot be trusted."""
