/// Carries a loop-confined reference through a `@Sendable` closure that runs on the same loop thread.
struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
