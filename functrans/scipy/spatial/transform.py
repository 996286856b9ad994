"""``functrans.scipy.spatial.transform``: 3-D rotations (as
``jax.scipy.spatial.transform``).

A :class:`Rotation` holds unit quaternions in SciPy's scalar-last order ``(x, y, z, w)``:
one rotation has ``quat`` of shape ``(4,)``, a stack of ``N`` has shape ``(N, 4)``. It is a
NamedTuple, hence a pytree, so rotations pass through ``jit``, ``vmap`` and ``grad``.

    >>> import functrans.numpy as jnp
    >>> r = Rotation.from_rotvec(jnp.array([0.0, 0.0, jnp.pi / 2]))
    >>> r.apply(jnp.array([1.0, 0.0, 0.0])).round(5)
    Array([0., 1., 0.], dtype=float32)
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from functrans import numpy as jnp
from functrans import random as jrandom

__all__ = ["Rotation", "Slerp"]


# =============================================================================================
# quaternion algebra on (..., 4) arrays, scalar last
# =============================================================================================

def _as_float(x):
    x = jnp.asarray(x)
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)
    # a strongly typed array, as quaternions built from Python scalars are stored
    return jnp.asarray(x, dtype=dtype)


def _normalize(quat):
    return quat / jnp.linalg.norm(quat, axis=-1, keepdims=True)


def _compose(p, q):
    """The Hamilton product ``p q``: the rotation ``q`` followed by ``p``."""
    pv, pw = p[..., :3], p[..., 3:]
    qv, qw = q[..., :3], q[..., 3:]
    vector = pw * qv + qw * pv + jnp.cross(pv, qv)
    scalar = pw * qw - jnp.sum(pv * qv, axis=-1, keepdims=True)
    return jnp.concatenate([vector, scalar], axis=-1)


def _vector_norm(v):
    """``|v|`` over the last axis, keeping dims, with derivative 0 (not NaN) at ``v = 0``."""
    squared = jnp.sum(v * v, axis=-1, keepdims=True)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1)), 0)


def _conjugate(quat):
    return jnp.concatenate([-quat[..., :3], quat[..., 3:]], axis=-1)


def _safe_small_angle(small, angle):
    """``angle`` where it is not small, else 1: series branches of ``where`` are then never
    evaluated at 0, which keeps gradients finite."""
    return jnp.where(small, jnp.ones_like(angle), angle)


def _quat_from_rotvec(rotvec):
    squared = jnp.sum(rotvec * rotvec, axis=-1, keepdims=True)
    # near 0 use Taylor series in angle**2: the quotient loses precision there, and the
    # norm's derivative at 0 is undefined, so the other branch is fed a harmless 1
    small = squared < 1e-6
    angle = jnp.sqrt(jnp.where(small, jnp.ones_like(squared), squared))
    scale = jnp.where(small, 0.5 - squared / 48 + squared ** 2 / 3840,
                      jnp.sin(angle / 2) / angle)
    w = jnp.where(small, 1 - squared / 8 + squared ** 2 / 384, jnp.cos(angle / 2))
    return jnp.concatenate([scale * rotvec, w], axis=-1)


def _rotvec_from_quat(quat):
    # q and -q are the same rotation; w >= 0 picks the angle in [0, pi]
    quat = jnp.where(quat[..., 3:] < 0, -quat, quat)
    angle = 2 * jnp.arctan2(_vector_norm(quat[..., :3]), quat[..., 3:])
    small = angle < 1e-3
    safe = _safe_small_angle(small, angle)
    scale = jnp.where(small, 2 + angle ** 2 / 12 + 7 * angle ** 4 / 2880,
                      safe / jnp.sin(safe / 2))
    return scale * quat[..., :3]


def _matrix_from_quat(quat):
    x, y, z, w = (quat[..., i] for i in range(4))
    rows = [
        [w * w + x * x - y * y - z * z, 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), w * w - x * x + y * y - z * z, 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), w * w - x * x - y * y + z * z],
    ]
    return jnp.stack([jnp.stack(row, axis=-1) for row in rows], axis=-2)


def _quat_from_matrix(m):
    """Markley's method: of the four ways to read a quaternion off a rotation matrix, use
    the one built on the largest of ``m00, m11, m22, trace``, which divides by the largest
    quaternion component and so is the best conditioned."""
    trace = m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2]
    candidates = []
    for i in range(3):
        j, k = (i + 1) % 3, (i + 2) % 3
        q = [None] * 4
        q[i] = 1 - trace + 2 * m[..., i, i]
        q[j] = m[..., j, i] + m[..., i, j]
        q[k] = m[..., k, i] + m[..., i, k]
        q[3] = m[..., k, j] - m[..., j, k]
        candidates.append(jnp.stack(q, axis=-1))
    candidates.append(jnp.stack([m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                                 m[..., 1, 0] - m[..., 0, 1], 1 + trace], axis=-1))
    candidates = jnp.stack(candidates, axis=-2)  # (..., 4 choices, 4)
    decision = jnp.stack([m[..., 0, 0], m[..., 1, 1], m[..., 2, 2], trace], axis=-1)
    choice = jnp.argmax(decision, axis=-1)
    quat = jnp.take_along_axis(candidates, choice[..., None, None], axis=-2)[..., 0, :]
    return _normalize(quat)


_AXES = {"x": 0, "y": 1, "z": 2}


def _parse_seq(seq, fname):
    if not isinstance(seq, str) or not 1 <= len(seq) <= 3:
        raise ValueError(f"{fname}: expected an axis sequence of 1 to 3 characters, got "
                         f"{seq!r}")
    if not (seq.islower() or seq.isupper()) or any(c not in "xyz" for c in seq.lower()):
        raise ValueError(f"{fname}: axes must all be from 'xyz' (extrinsic) or all from "
                         f"'XYZ' (intrinsic), got {seq!r}")
    if any(a == b for a, b in zip(seq, seq[1:])):
        raise ValueError(f"{fname}: consecutive axes must differ, got {seq!r}")
    return [_AXES[c] for c in seq.lower()], seq.islower()


def _elementary_quat(axis, angle):
    half = angle / 2
    parts = [jnp.zeros_like(half)] * 3
    parts[axis] = jnp.sin(half)
    return jnp.stack(parts + [jnp.cos(half)], axis=-1)


def _euler_from_quat(quat, axes, extrinsic):
    """Euler angles by the quaternion method of Bernardes & Viollet (2022), with SciPy's
    conventions: angles in [-pi, pi], the middle one in [0, pi] (proper Euler) or
    [-pi/2, pi/2] (Tait-Bryan), and the third angle set to 0 at gimbal lock."""
    i, j, k = axes
    if not extrinsic:
        i, k = k, i
    symmetric = i == k
    if symmetric:
        k = 3 - i - j
    # +1 for an even permutation (i, j, k) of (0, 1, 2), -1 for an odd one
    sign = (i - j) * (j - k) * (k - i) // 2
    w = quat[..., 3]
    if symmetric:
        a, b, c, d = w, quat[..., i], quat[..., j], quat[..., k] * sign
    else:
        a = w - quat[..., j]
        b = quat[..., i] + quat[..., k] * sign
        c = quat[..., j] + w
        d = quat[..., k] * sign - quat[..., i]
    middle = 2 * jnp.arctan2(jnp.hypot(c, d), jnp.hypot(a, b))
    eps = 1e-7
    at_zero = jnp.abs(middle) <= eps
    at_pi = jnp.abs(middle - np.pi) <= eps
    degenerate = at_zero | at_pi
    half_sum = jnp.arctan2(b, a)
    half_diff = jnp.arctan2(d, c)
    first_index, third_index = (0, 2) if extrinsic else (2, 0)
    angles = [None, middle, None]
    angles[first_index] = half_sum - half_diff
    angles[third_index] = half_sum + half_diff
    # at gimbal lock only the sum (or difference) of the outer angles is determined
    locked = jnp.where(at_zero, 2 * half_sum, 2 * half_diff * (-1 if extrinsic else 1))
    angles[0], angles[2] = (jnp.where(degenerate, locked, angles[0]),
                            jnp.where(degenerate, jnp.zeros_like(middle), angles[2]))
    if not symmetric:
        angles[third_index] = angles[third_index] * sign
        angles[1] = angles[1] - np.pi / 2
    angles = jnp.stack(angles, axis=-1)
    angles = jnp.where(angles < -np.pi, angles + 2 * np.pi, angles)
    return jnp.where(angles > np.pi, angles - 2 * np.pi, angles)


# =============================================================================================
# Rotation
# =============================================================================================

class Rotation(NamedTuple):
    """One rotation or a stack of rotations in 3 dimensions, stored as unit quaternions
    ``quat`` (scalar last). Build one with the ``from_*`` constructors.

        >>> Rotation.from_euler("z", 90.0, degrees=True).as_rotvec().round(4)
        Array([0.    , 0.    , 1.5708], dtype=float32)
    """
    quat: Any

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_quat(cls, quat):
        """Rotations from quaternions ``(x, y, z, w)`` (normalized here).

            >>> Rotation.from_quat(jnp.array([0.0, 0.0, 0.0, 2.0])).quat
            Array([0., 0., 0., 1.], dtype=float32)
        """
        quat = _as_float(quat)
        if jnp.ndim(quat) not in (1, 2) or jnp.shape(quat)[-1] != 4:
            raise ValueError(f"Rotation.from_quat: expected shape (4,) or (N, 4), got "
                             f"{jnp.shape(quat)}")
        return cls(_normalize(quat))

    @classmethod
    def from_matrix(cls, matrix):
        """Rotations from rotation matrices of shape ``(3, 3)`` or ``(N, 3, 3)``.

            >>> Rotation.from_matrix(jnp.eye(3)).quat
            Array([0., 0., 0., 1.], dtype=float32)
        """
        matrix = _as_float(matrix)
        if jnp.ndim(matrix) not in (2, 3) or jnp.shape(matrix)[-2:] != (3, 3):
            raise ValueError(f"Rotation.from_matrix: expected shape (3, 3) or (N, 3, 3), "
                             f"got {jnp.shape(matrix)}")
        return cls(_quat_from_matrix(matrix))

    @classmethod
    def from_rotvec(cls, rotvec, degrees: bool = False):
        """Rotations from rotation vectors (axis times angle), shape ``(3,)`` or ``(N, 3)``.

            >>> Rotation.from_rotvec(jnp.array([0.0, 0.0, jnp.pi / 2])).quat.round(5)
            Array([0.     , 0.     , 0.70711, 0.70711], dtype=float32)
        """
        rotvec = _as_float(rotvec)
        if jnp.ndim(rotvec) not in (1, 2) or jnp.shape(rotvec)[-1] != 3:
            raise ValueError(f"Rotation.from_rotvec: expected shape (3,) or (N, 3), got "
                             f"{jnp.shape(rotvec)}")
        if degrees:
            rotvec = jnp.deg2rad(rotvec)
        return cls(_quat_from_rotvec(rotvec))

    @classmethod
    def from_mrp(cls, mrp):
        """Rotations from Modified Rodrigues Parameters (``axis * tan(angle / 4)``).

            >>> Rotation.from_mrp(jnp.array([0.0, 0.0, 1.0])).as_rotvec().round(4)
            Array([0.    , 0.    , 3.1416], dtype=float32)
        """
        mrp = _as_float(mrp)
        if jnp.ndim(mrp) not in (1, 2) or jnp.shape(mrp)[-1] != 3:
            raise ValueError(f"Rotation.from_mrp: expected shape (3,) or (N, 3), got "
                             f"{jnp.shape(mrp)}")
        squared = jnp.sum(mrp * mrp, axis=-1, keepdims=True)
        quat = jnp.concatenate([2 * mrp, 1 - squared], axis=-1) / (1 + squared)
        return cls(quat)

    @classmethod
    def from_euler(cls, seq: str, angles, degrees: bool = False):
        """Rotations from Euler angles about the axes in ``seq``: lowercase (``'xyz'``) for
        rotations about the fixed frame's axes (extrinsic), uppercase (``'XYZ'``) for the
        rotating frame's (intrinsic). ``angles`` has shape ``(len(seq),)`` or
        ``(N, len(seq))``; with one axis also ``()`` or ``(N,)``.

            >>> Rotation.from_euler("xy", jnp.array([90.0, 0.0]), degrees=True).as_rotvec()
            Array([1.5707964, 0.       , 0.       ], dtype=float32)
        """
        axes, extrinsic = _parse_seq(seq, "Rotation.from_euler")
        angles = _as_float(angles)
        shape = jnp.shape(angles)
        if len(axes) == 1 and len(shape) <= 1:
            angles = angles[..., None]
        elif not (len(shape) in (1, 2) and shape[-1] == len(axes)):
            raise ValueError(f"Rotation.from_euler: for seq {seq!r} expected angles of shape "
                             f"({len(axes)},) or (N, {len(axes)}), got {shape}")
        if degrees:
            angles = jnp.deg2rad(angles)
        quat = _elementary_quat(axes[0], angles[..., 0])
        for n, axis in enumerate(axes[1:], start=1):
            step = _elementary_quat(axis, angles[..., n])
            # extrinsic: each later rotation acts in the fixed frame, so it multiplies on
            # the left; intrinsic: in the rotated frame, on the right
            quat = _compose(step, quat) if extrinsic else _compose(quat, step)
        return cls(quat)

    @classmethod
    def identity(cls, num: int | None = None, dtype=float):
        """The identity rotation, or ``num`` of them.

            >>> Rotation.identity().quat
            Array([0., 0., 0., 1.], dtype=float32)
        """
        quat = jnp.array([0.0, 0.0, 0.0, 1.0], dtype=dtype)
        if num is not None:
            quat = jnp.tile(quat, (num, 1))
        return cls(quat)

    @classmethod
    def random(cls, random_key, num: int | None = None):
        """Rotations drawn uniformly from SO(3): normalized standard-normal 4-vectors are
        uniform on the unit sphere of quaternions, which covers SO(3) uniformly.

            >>> import functrans.random as jrandom
            >>> Rotation.random(jrandom.PRNGKey(0), 5).quat.shape
            (5, 4)
        """
        shape = (4,) if num is None else (num, 4)
        return cls(_normalize(jrandom.normal(random_key, shape)))

    @classmethod
    def concatenate(cls, rotations: Sequence["Rotation"]):
        """One stack from several rotations or stacks of rotations.

            >>> Rotation.concatenate([Rotation.identity(), Rotation.identity(2)]).quat.shape
            (3, 4)
        """
        return cls(jnp.concatenate([jnp.atleast_2d(r.quat) for r in rotations], axis=0))

    # ------------------------------------------------------------------ representations
    @property
    def single(self) -> bool:
        """Whether this is one rotation rather than a stack."""
        return jnp.ndim(self.quat) == 1

    def as_quat(self, canonical: bool = False, scalar_first: bool = False):
        """The quaternions; with ``canonical``, the one of ``q``, ``-q`` whose first nonzero
        component in ``(w, x, y, z)`` order is positive; with ``scalar_first``, ordered
        ``(w, x, y, z)``.

            >>> Rotation.from_quat(jnp.array([1.0, 2.0, 2.0, -4.0])).as_quat(canonical=True)
            Array([-0.2, -0.4, -0.4,  0.8], dtype=float32)
        """
        quat = self.quat
        if canonical:
            x, y, z, w = (quat[..., i] for i in range(4))
            flip = (w < 0) | ((w == 0) & ((x < 0) | ((x == 0) & ((y < 0) | (
                (y == 0) & (z < 0))))))
            quat = jnp.where(flip[..., None], -quat, quat)
        if scalar_first:
            quat = jnp.concatenate([quat[..., 3:], quat[..., :3]], axis=-1)
        return quat

    def as_matrix(self):
        """The rotation matrices, shape ``(3, 3)`` or ``(N, 3, 3)``.

            >>> Rotation.identity().as_matrix()[0]
            Array([1., 0., 0.], dtype=float32)
        """
        return _matrix_from_quat(self.quat)

    def as_rotvec(self, degrees: bool = False):
        """The rotation vectors (axis times angle, the angle in ``[0, pi]``).

            >>> Rotation.identity().as_rotvec()
            Array([0., 0., 0.], dtype=float32)
        """
        rotvec = _rotvec_from_quat(self.quat)
        return jnp.rad2deg(rotvec) if degrees else rotvec

    def as_mrp(self):
        """The Modified Rodrigues Parameters (``axis * tan(angle / 4)``, angle in
        ``[0, pi]``).

            >>> Rotation.identity().as_mrp()
            Array([0., 0., 0.], dtype=float32)
        """
        sign = jnp.where(self.quat[..., 3:] < 0, -1.0, 1.0).astype(self.quat.dtype)
        return sign * self.quat[..., :3] / (1 + sign * self.quat[..., 3:])

    def as_euler(self, seq: str, degrees: bool = False):
        """Euler angles for the 3-axis sequence ``seq`` (see :meth:`from_euler`), with
        SciPy's ranges and its gimbal-lock convention (third angle 0).

            >>> r = Rotation.from_euler("xyz", jnp.array([0.1, 0.2, 0.3]))
            >>> r.as_euler("xyz").round(4)
            Array([0.1, 0.2, 0.3], dtype=float32)
        """
        axes, extrinsic = _parse_seq(seq, "Rotation.as_euler")
        if len(axes) != 3:
            raise ValueError(f"Rotation.as_euler: expected 3 axes, got {seq!r}")
        angles = _euler_from_quat(self.quat, axes, extrinsic)
        return jnp.rad2deg(angles) if degrees else angles

    def magnitude(self):
        """The rotation angles, in ``[0, pi]``.

            >>> Rotation.from_rotvec(jnp.array([0.0, 0.5, 0.0])).magnitude()
            Array(0.5, dtype=float32)
        """
        vector_norm = _vector_norm(self.quat[..., :3])[..., 0]
        return 2 * jnp.arctan2(vector_norm, jnp.abs(self.quat[..., 3]))

    # ------------------------------------------------------------------ operations
    def apply(self, vectors, inverse: bool = False):
        """Rotate ``vectors`` (shape ``(3,)`` or ``(N, 3)``); one rotation applies to every
        vector, one vector is rotated by every rotation, else they pair up.

            >>> r = Rotation.from_euler("z", 90.0, degrees=True)
            >>> r.apply(jnp.array([1.0, 0.0, 0.0])).round(5)
            Array([0., 1., 0.], dtype=float32)
        """
        vectors = jnp.asarray(vectors)
        if jnp.ndim(vectors) not in (1, 2) or jnp.shape(vectors)[-1] != 3:
            raise ValueError(f"Rotation.apply: expected vectors of shape (3,) or (N, 3), "
                             f"got {jnp.shape(vectors)}")
        matrix = self.as_matrix()
        if inverse:
            matrix = jnp.swapaxes(matrix, -1, -2)
        if not self.single and jnp.ndim(vectors) == 2 \
                and jnp.shape(vectors)[0] != jnp.shape(matrix)[0]:
            raise ValueError(f"Rotation.apply: {jnp.shape(matrix)[0]} rotations cannot "
                             f"apply to {jnp.shape(vectors)[0]} vectors")
        return jnp.matmul(matrix, vectors[..., None])[..., 0]

    def inv(self):
        """The inverse rotations.

            >>> r = Rotation.from_rotvec(jnp.array([0.1, 0.2, 0.3]))
            >>> (r * r.inv()).magnitude() < 1e-6
            Array(True, dtype=bool)
        """
        return Rotation(_conjugate(self.quat))

    def __mul__(self, other: "Rotation") -> "Rotation":
        """The composition ``self * other``: ``other`` is applied first."""
        if not isinstance(other, Rotation):
            return NotImplemented
        return Rotation(_compose(self.quat, other.quat))

    def mean(self, weights=None):
        """The (weighted) mean rotation: the quaternion maximizing ``sum w (q . q_i)^2``, the
        top eigenvector of ``sum w q_i q_i^T``.

            >>> Rotation.identity(3).mean().magnitude()
            Array(0., dtype=float32)
        """
        quat = jnp.atleast_2d(self.quat)
        weights = jnp.ones(quat.shape[0], quat.dtype) if weights is None \
            else jnp.asarray(weights, quat.dtype)
        scatter = jnp.einsum("i,ij,ik->jk", weights, quat, quat)
        _, vectors = jnp.linalg.eigh(scatter)
        return Rotation(vectors[:, -1])

    def __getitem__(self, indexer):
        if self.single:
            raise TypeError("Single rotation is not subscriptable.")
        return Rotation(self.quat[indexer])

    def __len__(self):
        if self.single:
            raise TypeError("Single rotation has no len().")
        return self.quat.shape[0]


# =============================================================================================
# Slerp
# =============================================================================================

class Slerp(NamedTuple):
    """Spherical linear interpolation between key rotations at increasing key ``times``:
    constant angular velocity between consecutive keys. Build with :meth:`Slerp.init`;
    call with times. Times outside the key range extrapolate along the first or last
    segment.

        >>> keys = Rotation.from_euler("z", jnp.array([0.0, 90.0]), degrees=True)
        >>> s = Slerp.init(jnp.array([0.0, 1.0]), keys)
        >>> s(jnp.array(0.5)).as_rotvec(degrees=True).round(3)
        Array([ 0.,  0., 45.], dtype=float32)
    """
    times: Any
    timedelta: Any
    rotations: Any
    rotvecs: Any

    @classmethod
    def init(cls, times, rotations: Rotation):
        """An interpolator through ``rotations`` (a stack of at least 2) at ``times``
        (1-D, strictly increasing; not checked, as it may be traced)."""
        if not isinstance(rotations, Rotation):
            raise TypeError("Slerp.init: rotations must be a Rotation")
        if rotations.single:
            raise ValueError("Slerp.init: rotations must be a stack, not a single rotation")
        times = _as_float(times)
        if jnp.ndim(times) != 1 or times.shape[0] != len(rotations) or times.shape[0] < 2:
            raise ValueError(f"Slerp.init: expected 1-D times, one per rotation (at least "
                             f"2), got times of shape {jnp.shape(times)} for "
                             f"{len(rotations)} rotations")
        timedelta = jnp.diff(times)
        # the relative rotation from each key to the next, as a rotation vector
        rotvecs = (rotations[:-1].inv() * rotations[1:]).as_rotvec()
        return cls(times, timedelta, rotations, rotvecs)

    def __call__(self, times):
        """The interpolated rotations at ``times`` (a scalar gives a single rotation)."""
        times = jnp.asarray(times, self.times.dtype)
        segment = jnp.searchsorted(self.times, times, side="right") - 1
        segment = jnp.clip(segment, 0, self.timedelta.shape[0] - 1)
        alpha = (times - self.times[segment]) / self.timedelta[segment]
        step = Rotation.from_rotvec(jnp.reshape(self.rotvecs[segment] * alpha[..., None],
                                                (-1, 3)))
        start = Rotation(jnp.reshape(self.rotations.quat[segment], (-1, 4)))
        result = start * step
        return Rotation(result.quat[0]) if jnp.ndim(times) == 0 else result
