/// What this build is: `version`, the release it belongs to (the first line of `VERSION` at the repository root,
/// semantic versioning, e.g. `0.9.0`), and `commit`, git's abbreviated commit of the checkout it was built from
/// (12 hex digits, `-dirty` appended when tracked files differed from it, `unknown` when built outside a git
/// checkout). Both are written before every build by the in-repo `BuildInfoPlugin` (scripts/build-info.sh), so a
/// plain `swift build` carries them too. `pushizo-worker --version` prints them and `pushizo_build_info` labels
/// them (docs/metrics.md).
public enum BuildInfo {
    /// `pushizo-worker 0.9.0 (1a2b3c4d5e6f)`: what `pushizo-worker --version` prints.
    public static var versionLine: String { "pushizo-worker \(version) (\(commit))" }
}
