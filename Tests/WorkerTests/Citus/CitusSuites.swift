import Testing

/// Every Citus suite, nested here so that they run one at a time (`.serialized` reaches the nested suites): each
/// makes tables, databases and distributed objects on the one cluster `scripts/run-tests.sh` starts, and two of
/// them at once put the cluster's connections and locks under load that is the tests' own, not the design's.
/// Skipped without a cluster (``CitusCluster/absence``).
@Suite(.serialized, .enabled(if: CitusCluster.isAvailable, CitusCluster.absence))
enum CitusSuites {}
