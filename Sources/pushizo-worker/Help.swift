import Worker

/// `pushizo-worker help`: the settings part is generated from ``ConfigurationKey/all`` (each key's summary, accepted
/// values and default, as declared once) so it cannot drift.
enum Help {
    static var text: String {
        var text = """
            pushizo-worker: the Pushizo delivery worker (queue in PostgreSQL, pushes over HTTP/2 to APNs, FCM and Web Push)

            usage: pushizo-worker <command> [--flag value ...] [--env-file PATH ...]

            commands:
              run        expand notifications, claim deliveries, send them, write delivery events (the daemon)
              migrate    apply pending migrations/NNNN_*.sql files (advisory-locked; safe to run from many hosts)
              distribute [--json]
                         on a Citus coordinator, after migrate: switch the schema to its Citus form (lanes,
                         reference and distributed tables); idempotent, as the schema owner (docs/scale-out.md)
              preview [FILE | --notification ID --subscription ID]
                         show what one device would get: decision + exact provider request, from a document
                         or read from the database (read-only) (docs/preview.md)
              check      validate configuration, reach the database, report pending migrations and channels
              maintain   data lifecycle now: create event partitions ahead, drop those past PUSHIZO_EVENT_RETENTION,
                         fold count deltas, prune old frequency-cap grants and finished notifications
                         (docs/data-lifecycle.md)
              status [--app ID] [--json]
                         the fleet as the database sees it: queue depth per provider, queue lag, leases per
                         worker, sends and failures per minute, expansions, paused channels, apps and fleet,
                         worker processes (live, stale, stopped); --app narrows every figure to one app
                         (docs/status.md)
              pause (--app ID [--provider apns|fcm|webpush] | --fleet) [--until TIME] [--note TEXT]
                         an operator's pause of a channel, an app or the fleet (no claims; sends in flight
                         finish) (docs/operations.md)
              resume (--app ID [--provider apns|fcm|webpush] | --fleet) [--note TEXT]
                         lifts only an operator's pause
              cancel --notification ID [--note TEXT]
                         cancel it: what is not yet sent is skipped / canceled
              retry --notification ID [--reason R ...] [--since TIME] [--note TEXT]
                         requeue its failed deliveries to subscriptions still active, once each; R is a
                         failure reason (max_attempts, Unavailable, BadDeviceToken: any case, http_<status>)
                         (operator commands: as the schema owner, audited in operator_actions, --json)
              emulator   serve the built-in provider emulator (APNs, FCM, Web Push) over HTTP/2, TLS or h2c
              emulator-subscription --seed S --origin https://host:port ID...
                         print "id endpoint p256dh auth" for the Web Push emulator's subscriptions
              version    print "pushizo-worker <version> (<commit>)" (also --version)
              help       this text

            Every setting is an environment variable (a systemd EnvironmentFile can hold them) and a flag
            derived from its name; flags win. An unknown PUSHIZO_* variable or a bad value stops start-up
            naming the key (exit status 78), as does PostgreSQL refusing the connection for a reason only an
            operator can fix (a wrong password, an unknown role or database, missing rights). A wrong command
            line (an unknown flag, a bad value of a command's own flag) exits 2; a failure that may pass
            (the database unreachable) exits 1 (docs/operations.md, "Exit statuses"). PUSHIZO_TEST_*, PUSHIZO_BENCH_* and PUSHIZO_DEMO_* are reserved
            for the test suite, `make bench` and `make demo` and ignored. Durations are plain seconds (30,
            0.25) or a number with one unit: 500ms, 30s, 5m, 2h, 30d (retention and maintenance settings also
            take off).

            --env-file PATH (any command, repeatable) reads PATH as systemd reads EnvironmentFile= (KEY=VALUE
            lines, # and ; comments, quotes, backslash escapes and continuations; `export` is not stripped) and
            sets its variables first: a file's value wins over the shell's, a later file's over an earlier
            one's, a flag over both. A file that cannot be read exits 78.

            Under systemd (Type=notify, docs/systemd.md) the worker sends READY=1 after its first successful
            database round trip, STATUS= lines with the send rate and queue lag, and, when the unit sets
            WatchdogSec=, WATCHDOG=1 only while its claim loop, expand loops, completer and HTTP/2 I/O thread
            all make progress.

            settings:

            """
        for key in ConfigurationKey.all {
            let flag = key.flag.padding(toLength: 30, withPad: " ", startingAt: 0)
            text += "  \(flag) \(key.name)\n      \(key.summary)"
            if let range = key.rangeText { text += " (\(range))" }
            if let value = key.defaultValue { text += " [default: \(value)]" }
            text += "\n"
        }
        return text
    }
}
