import Foundation

/// Which due notifications a call of ``ExpansionStore/expandNext(on:chunkSize:suspects:pick:)`` may pick.
public enum ExpansionPick: Sendable, Equatable {
    /// Any due notification, least recently served first.
    case any
    /// Any due notification except the small ones ``SmallNotificationStore/expandSmallNotifications(on:limit:suspects:)``
    /// takes in bulk: the expand loop calls this after each bulk pass, so a broadcast's next chunk runs
    /// between two passes however steady the stream of small notifications.
    case skippingSmall
    /// This notification only, if it is still due and not locked by another worker.
    case only(UUID)
    /// A slice of a broadcast cut into slices (``ExpansionStore/Slicing``): the notification's row is
    /// not locked, so several tasks and workers expand different slices of one notification at once.
    case slice
}
