internal import CLibPSL

/// The registrable domain of a host name: the public suffix plus one label ("eTLD+1", as the Public Suffix List
/// defines it, https://publicsuffix.org/list/), read from the list built into libpsl (`psl_builtin`). Whoever
/// registered it controls every name beneath it, and with them their DNS, so names under one registrable domain
/// share one fate: `h1.slow.example.org` and `h2.slow.example.org` are both `example.org`; `a.github.io` and
/// `b.github.io` are two (`github.io` is a suffix under which anyone may register a name).
///
/// A name that is a public suffix itself (`com`, `github.io`, `localhost`), or that the list cannot place, is its
/// own key; so is an address literal (the list would read `127.0.0.1` as a name under `1`).
enum RegistrableDomain {
    /// The list compiled into libpsl; Debian builds it in. Should a build lack it, the list installed with
    /// libpsl (`psl_latest` reads `/usr/share/publicsuffix`) is loaded once instead; without either, every name is
    /// its own key. Read-only after creation, so any thread may use it.
    nonisolated(unsafe) private static let list: OpaquePointer? = psl_builtin() ?? psl_latest(nil)

    /// The key of `host` (a host name or address literal, without brackets or port): its registrable domain in
    /// lower case, or the host itself (lower case, without a trailing dot) when it has none.
    static func key(of host: String) -> String {
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        guard !name.isEmpty, let list, SocketAddress.literal(name, port: 0) == nil else { return name }
        return name.withCString { text in psl_registrable_domain(list, text).map { String(cString: $0) } } ?? name
    }
}
