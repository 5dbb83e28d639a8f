"""Analysis on synthetic ground truth (DESIGN §5.6) and on degenerate or bad input."""

import numpy as np
import pytest

import attndyn as ad
from attndyn.analysis import clusters, geometry, lowrank, spectra

# The paper's matrices (SPEC §3).
V2 = np.array([[0.64709742, 0.81911926], [0.61210449, 0.63263484]])
V3A = np.array([[0.2362413, 0.0599536, 0.40506019], [0.81321448, 0.49948705, 0.33754772], [0.2160645, 0.38505272, 0.14588075]])
V3B = np.array([[0.18608476, 0.34391026, 0.13905949], [0.35244288, 0.6694859, 0.39992145], [0.46685606, 0.17094454, 0.42092308]])
VC = np.array([[0.92761287, 0.94333073, 0.3827744], [0.94333073, 0.59991396, 0.47825472], [0.3827744, 0.47825472, 0.46668605]])


def test_known_polytope_vertices_are_recovered(rng):
    angles = np.linspace(0, 2 * np.pi, 6, endpoint=False)
    true = 5 * np.c_[np.cos(angles), np.sin(angles)]
    near = np.repeat(true, 3, axis=0) + rng.normal(0, 1e-6, (18, 2))
    interior = rng.uniform(-2, 2, (10, 2))
    pts = np.vstack([near, interior])
    idx = geometry.hull_vertices(pts)
    assert (idx < 18).all()  # no interior point is a vertex
    nearest_true = np.argmin(np.linalg.norm(pts[idx][:, None] - true[None], axis=-1), axis=1)
    assert set(nearest_true) == set(range(6))
    assert geometry.distance_to_vertices(near, true).max() < 1e-5
    # a broken hull (dropping a vertex) must be caught by the same check
    assert geometry.distance_to_vertices(near, true[1:]).max() > 1


def test_points_on_known_hyperplanes(rng):
    phi_star, lam, phi = geometry.left_eigenvector(V2)
    assert np.isclose(phi_star @ phi, 1.0)
    np.testing.assert_allclose(phi_star @ V2, lam * phi_star, atol=1e-12)
    psi = np.array([-phi_star[1], phi_star[0]])  # phi_star(psi) = 0
    values = rng.choice([-3.0, 0.0, 2.5], size=30)
    z = values[:, None] * phi + rng.normal(0, 10, 30)[:, None] * psi
    np.testing.assert_allclose(geometry.hyperplane_coordinates(z, V2), values, atol=1e-12)
    # the SPEC's check on the paper's example: the level lines have slope -phi*_1/phi*_2 = -0.87
    assert abs(-phi_star[0] / phi_star[1] - (-0.87)) < 0.01


def block_boolean(n, rng, noise=1e-12):
    P = np.zeros((n, n))
    P[:4, 0] = 1.0
    P[5:, n - 1] = 1.0
    P[4] = rng.dirichlet(np.ones(n))  # the one exceptional row
    P += noise * rng.random((n, n))
    return P / P.sum(1, keepdims=True)


def test_block_boolean_matrix(rng):
    P = block_boolean(10, rng)
    assert lowrank.numerical_rank(P, tol=1e-8) == 3
    np.testing.assert_array_equal(lowrank.leaders(P, tol=1e-4), [0, 9])
    np.testing.assert_array_equal(lowrank.exceptional_rows(P, tol=1e-8), [4])
    assert lowrank.boolean_distance(P) > 0.01
    Pb = np.delete(np.delete(P, 4, 0), 4, 1)
    Pb /= Pb.sum(1, keepdims=True)
    assert lowrank.boolean_distance(Pb) < 1e-10
    assert lowrank.numerical_rank(Pb, tol=1e-8) == 2
    np.testing.assert_array_equal(lowrank.nearest_boolean(Pb).sum(0)[[0, -1]], [4, 5])
    assert len(lowrank.support_columns(P, tol=1e-4)) == 10


def test_leader_log_gap_beyond_underflow():
    L = np.array([[0.0, -50.0, -80.0], [-60.0, 0.0, -70.0], [-1e3, -1e3 + 1.0, 0.0]])
    gap = lowrank.leader_log_gap(L)
    # 1 - P_lead = sum_{j != lead} e^{L_j} / sum e^{L}: about e^{-50} for row 0 (1 - P is 0.0 in float64)
    np.testing.assert_allclose(gap[0], 50.0 - np.log1p(np.exp(-30.0)), rtol=1e-12)
    np.testing.assert_allclose(gap[1], 60.0 - np.log1p(np.exp(-10.0)), rtol=1e-12)
    assert gap[2] > 998


def test_nested_clusters_stable_count(rng):
    centres = np.array([[0, 0], [100, 0], [0, 100]], dtype=float)
    sub = np.array([[0, 0], [0.01, 0]])
    pts = np.vstack([c + s + rng.normal(0, 1e-7, (5, 2)) for c in centres for s in sub])
    prof = clusters.cluster_count_profile(pts, [1e-3, 0.05, 10, 200])
    np.testing.assert_array_equal(prof, [6, 3, 3, 1])
    st = clusters.stable_cluster_count(pts)
    assert st.count == 3
    assert 0.009 < st.tol_low < 0.011
    assert 99 < st.tol_high < 101
    labels = clusters.cluster_labels(pts, tol=1.0)
    assert labels[0] == 0
    assert labels.max() == 2
    assert list(np.unique(labels, return_index=True)[1]) == sorted(np.unique(labels, return_index=True)[1])


def test_merge_events():
    ts = np.array([0.0, 1.0, 2.0, 3.0])
    xs = np.zeros((4, 3, 1))
    xs[:, 0, 0] = [0.0, 0.0, 0.0, 0.0]
    xs[:, 1, 0] = [1.0, 0.5, 1e-5, 0.0]
    xs[:, 2, 0] = [9.0, 9.0, 9.0, 9.0]
    events = clusters.merge_events(ts, xs, tol=1e-3)
    assert len(events) == 1
    assert events[0].t == 2.0
    assert events[0].groups == ((0,), (1,))


def test_hull_degenerate_cases():
    line = np.c_[np.linspace(-1, 2, 7), 2 * np.linspace(-1, 2, 7)]
    np.testing.assert_array_equal(geometry.hull_vertices(line), [0, 6])
    square3d = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0.5, 0.5, 0]], dtype=float)
    np.testing.assert_array_equal(geometry.hull_vertices(square3d), [0, 1, 2, 3])
    np.testing.assert_array_equal(geometry.hull_vertices(np.array([3.0, -1.0, 2.0])), [0, 1])
    np.testing.assert_array_equal(geometry.hull_vertices(np.ones((4, 2))), [0])
    dup = np.array([[0, 0], [1, 0], [0, 1], [1, 0], [0.2, 0.2]], dtype=float)
    got = geometry.hull_vertices(dup)
    assert len(got) == 3
    assert {tuple(dup[i]) for i in got} == {(0, 0), (1, 0), (0, 1)}


def test_support_function():
    pts = np.array([[0, 0], [2, 1], [-1, 3]], dtype=float)
    h = geometry.support_function(pts, np.eye(2))
    np.testing.assert_allclose(h, [2, 3])


def test_bad_input_raises():
    P = np.full((3, 3), 0.3)
    with pytest.raises(ValueError, match=r"rows of P .* do not sum to 1"):
        lowrank.boolean_distance(P)
    rot = np.array([[0.0, -2.0], [2.0, 0.5]])
    with pytest.raises(ValueError, match=r"eigenvalue of largest modulus .* is complex"):
        geometry.left_eigenvector(rot)
    with pytest.raises(ValueError, match=r"not simple"):
        geometry.left_eigenvector(np.eye(2))
    nan = np.array([[0.0, 1.0], [np.nan, 2.0]])
    with pytest.raises(ValueError, match="non-finite"):
        clusters.cluster_labels(nan, tol=0.1)
    with pytest.raises(ValueError, match="non-finite"):
        geometry.hull_vertices(nan)
    with pytest.raises(ValueError, match="non-finite"):
        geometry.left_eigenvector(nan)
    with pytest.raises(ValueError, match="non-finite"):
        lowrank.numerical_rank(np.array([[np.nan, 1.0], [0.0, 1.0]]), tol=1e-8)
    with pytest.raises(ValueError, match=r"tol=0.0 must be"):
        clusters.cluster_labels(np.zeros((3, 2)), tol=0.0)


def test_unstable_projection_is_along_the_stable_subspace(rng):
    S = np.array([[1.0, 0.4, 0.3], [0.0, 1.0, 0.5], [0.2, 0.0, 1.0]])
    V = S @ np.diag([2.0, 0.5, -1.0]) @ np.linalg.inv(S)
    z = rng.normal(size=(6, 3))
    u = geometry.unstable_projection(z, V)
    assert u.shape == (6, 2)
    np.testing.assert_allclose(geometry.unstable_projection(z + 3.7 * S[:, 2], V), u, atol=1e-12)
    assert np.linalg.norm(geometry.unstable_projection(S[:, :1].T, V)) > 0.5


def test_paranormal_split():
    sp = geometry.paranormal_split(np.diag([1.0, 1.0, -0.5]))
    assert sp.dim_F == 2
    assert sp.lam == 1.0
    np.testing.assert_allclose(sp.pi_F, np.diag([1.0, 1.0, 0.0]), atol=1e-12)
    S = np.array([[1.0, 0.3, 0.5], [0.2, 1.0, 0.0], [0.0, 0.4, 1.0]])
    V = S @ np.diag([2.0, 2.0, 1.0]) @ np.linalg.inv(S)
    sp = geometry.paranormal_split(V)
    np.testing.assert_allclose(sp.pi_F, S @ np.diag([1, 1, 0]) @ np.linalg.inv(S), atol=1e-10)
    assert geometry.paranormal_split(np.array([[1.0, 1.0], [0.0, 1.0]])) is None  # Jordan block
    assert geometry.paranormal_split(np.diag([1.0, -1.0])) is None  # rho(V|_G) = lambda


def W(V, QK=None):
    return ad.Weights.from_value(np.asarray(V, dtype=float), QK=None if QK is None else np.asarray(QK, dtype=float))


@pytest.mark.parametrize(
    ("weights", "name"),
    [
        (W([[1.0]], [[2.0]]), "boolean-1d"),
        (W(np.eye(2)), "polytope"),
        (W(2 * np.eye(3), [[2, 0.5, 0], [0.5, 1, 0], [0, 0, 1]]), "polytope"),
        (W(-np.eye(2)), "collapse"),
        (W(V2), "hyperplanes"),
        (W(V3A), "hyperplanes"),
        (W(V3B), "hyperplanes"),
        (W(VC), "hyperplanes"),
        (W(np.diag([1.0, 1.0, -0.5])), "polytope-subspace"),
        (W(np.eye(2), [[1.0, 2.0], [-2.0, 1.0]]), "relaxed"),
        (W(np.eye(2), [[1.0, 0.0], [0.0, -1.0]]), "relaxed"),
        (W(np.diag([1.0, 1.0, -0.5]), np.diag([1.0, -1.0, 1.0])), "relaxed"),
        (W(V2, -np.eye(2)), "relaxed"),
        (W(np.diag([-3.0, 1.0, 0.5])), "codimension-conjecture"),
        (W([[0.0, -2.0], [2.0, 0.5]]), "none"),
        (W(-np.eye(2), [[1.0, 0.3], [0.3, 1.0]]), "none"),
    ],
)
def test_regime_names(weights, name):
    assert spectra.regime(weights).name == name


def test_regime_reports_conjecture_beside_proven_result():
    r = spectra.regime(W(VC))
    assert r.variable == "z"
    assert any("k = 2" in a for a in r.also)
    r3b = spectra.regime(W(V3B))
    assert any("k = 3" in a for a in r3b.also)
    # V = I (repeated positive eigenvalue): the conjecture is not applied (SPEC §2.5)
    assert spectra.regime(W(np.eye(2))).also == ()


def test_multihead_and_feedforward_are_none(rng):
    Wm = ad.Weights(rng.normal(size=(2, 2, 2)), rng.normal(size=(2, 2, 2)), rng.normal(size=(2, 2, 2)))
    assert spectra.regime(Wm).name == "none"
    hs = spectra.head_spectra(Wm)
    assert len(hs) == 2
    assert all(len(h.eig_V) == 2 for h in hs)
    Wf = ad.Weights(np.eye(2), np.eye(2), V2, ad.FeedForward(np.eye(2), "relu"))
    assert spectra.regime(Wf).name == "none"


def test_head_spectra_good_triple_uses_unsymmetrized_form():
    # Def. 4.1 (ii) only asks <Q phi_1, K phi_1> > 0: here it holds while Q^T K is non-symmetric and its
    # symmetric part indefinite, so the head is a good triple without Q^T K being positive definite.
    B = np.array([[1.0, 3.0], [-3.0, -0.5]])
    hs = spectra.head_spectra(W(V2, B))[0]
    _, _, phi = geometry.left_eigenvector(V2)
    assert hs.top_real_positive_simple
    assert np.isclose(hs.qk_phi1, phi @ B @ phi)
    assert hs.good_triple == (phi @ B @ phi > 0)
    assert hs.eig_sym_QK.min() < 0 < hs.eig_sym_QK.max()


# --- one definition of the cluster count that can say "one" (issue 21, item 7) ----------------------


def test_a_collapse_counts_one_cluster_relative_to_where_it_started(rng):
    start = rng.normal(0, 4.0, (30, 2))  # diameter ~13
    collapsed = rng.normal(0, 5e-6, (30, 2))  # diameter ~2e-5: a point, seen from the start
    assert clusters.stable_cluster_count(collapsed, scale=clusters.diameter_of(start)).count == 1
    # without the reference scale the same points are a cloud of 30 (what analyze used to report)
    assert clusters.stable_cluster_count(collapsed).count == 30


@pytest.mark.parametrize("scale", [1e-8, 1e-4, 1.0, 1e3])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_k_tight_clusters_count_k_at_any_common_scale(rng, scale, k):
    centres = rng.normal(0, 1.0, (k, 3)) * scale * 10
    pts = np.vstack([c + rng.normal(0, 1e-7 * scale, (6, 3)) for c in centres])
    reference = clusters.diameter_of(pts) if k > 1 else scale * 10
    assert clusters.stable_cluster_count(pts, scale=reference).count == k
    if k > 1:
        assert clusters.stable_cluster_count(pts).count == k


def test_a_still_spreading_cloud_has_no_clusters(rng):
    cloud = rng.uniform(-1, 1, (40, 2))
    st = clusters.stable_cluster_count(cloud, scale=2.0)
    assert st.count == 40  # every token its own: no gap separates groups
    assert st.verdict == "no structure"


def test_the_sweep_measure_and_analyze_count_a_collapse_alike(rng):
    from attndyn.workflow.measures import cluster_count

    xs = np.stack([rng.normal(0, 4.0, (30, 2)), rng.normal(0, 5e-6, (30, 2))])
    assert cluster_count(np.array([0.0, 1.0]), xs, None, {"cluster_tol": 1e-3}) == 1.0
    three = np.vstack([c + rng.normal(0, 1e-6, (10, 2)) for c in ([0, 0], [5, 0], [0, 5])])
    xs = np.stack([rng.normal(0, 4.0, (30, 2)), three])
    assert cluster_count(np.array([0.0, 1.0]), xs, None, {"cluster_tol": 1e-3}) == 3.0
    # a cloud without structure is NaN, not its 30 tokens: a mean over seeds never mixes it with counts (issue 47)
    cloud = rng.uniform(-1, 1, (30, 2))  # a cloud that has not moved
    xs = np.stack([cloud, cloud])
    assert (
        clusters.stable_cluster_count(cloud, scale=clusters.diameter_of(cloud), rel_min=1e-3 / clusters.diameter_of(cloud)).verdict == "no structure"
    )
    assert np.isnan(cluster_count(np.array([0.0, 1.0]), xs, None, {"cluster_tol": 1e-3}))


def test_low_rank_spectra_equal_the_dense_ones():
    """A trained head's V = W_O W_V has rank d_head: eigenvalues and the top left/right eigenvectors come
    from the reduced problem of range_basis, and equal numpy's dense ones (non-zero part to 1e-12)."""
    from attndyn.analysis import geometry as g

    rng = np.random.default_rng(4)
    d, r = 160, 12
    # V = A C B^T with different column and row spaces, C chosen so that the eigenvalues are 3, 0.2..1 and 0
    A, B, S = rng.normal(size=(d, r)), rng.normal(size=(d, r)), rng.normal(size=(r, r))
    C = S @ np.diag(np.r_[3.0, np.linspace(0.2, 1.0, r - 1)]) @ np.linalg.inv(S) @ np.linalg.inv(B.T @ A)
    V = A @ C @ B.T
    assert g.range_basis(V) is not None
    assert g.range_basis(rng.normal(size=(d, d))) is None  # full rank: the dense path
    w, dense = g.eigenvalues(V), np.linalg.eigvals(V)
    big = lambda x: np.sort_complex(x[np.abs(x) > 1e-9])  # noqa: E731
    np.testing.assert_allclose(big(w), big(dense), rtol=1e-12, atol=1e-12)
    assert (np.abs(w) <= 1e-12).sum() == d - r  # the zero eigenvalues, exactly
    phi_star, lam, phi = g.left_eigenvector(V)
    assert lam == pytest.approx(3.0, rel=1e-12)
    np.testing.assert_allclose(phi_star @ V, lam * phi_star, atol=1e-11)
    np.testing.assert_allclose(V @ phi, lam * phi, atol=1e-11)
    assert phi_star @ phi == pytest.approx(1.0, rel=1e-12)
