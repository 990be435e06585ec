import Foundation
import HubProtocol

/// The device's power, read from the kernel's power supplies (`/sys/class/power_supply`), and the
/// least urgency of push message to hand to apps in that state (UnifiedPush, after RFC 8030 §5.3).
struct PowerState: Equatable {
    /// On an external supply (mains or USB), or with no battery at all.
    var onMains: Bool
    /// The battery's charge while on battery.
    var batteryPercent: Int?

    /// Everything on mains power; `low` and above on battery; only `high` on a battery at 15% or less.
    var minimumUrgency: PushUrgency {
        if onMains { return .veryLow }
        if let percent = batteryPercent, percent <= 15 { return .high }
        return .low
    }

    /// Reads the supplies under `root`: each folder's `type` (Mains, USB, Battery), `online`, and a
    /// battery's `status` and `capacity`. A battery that charges, is full or is not discharging
    /// means an external supply.
    static func read(root: URL) -> PowerState {
        func value(_ folder: URL, _ name: String) -> String? {
            // Absent where a supply does not report this value.
            (try? String(contentsOf: folder.appendingPathComponent(name), encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        // No supplies to read (a desktop, a container): taken as on mains.
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: root.path) else { return PowerState(onMains: true) }
        var external = false
        var discharging: [Int?] = []
        for name in names.sorted() {
            let folder = root.appendingPathComponent(name)
            switch value(folder, "type") {
            case "Mains", "USB":
                if value(folder, "online") == "1" { external = true }
            case "Battery":
                if value(folder, "scope") == "Device" { continue }  // a mouse's or a keyboard's
                if value(folder, "status") == "Discharging" { discharging.append(value(folder, "capacity").flatMap { Int($0) }) }
            default:
                break
            }
        }
        guard !external, !discharging.isEmpty else { return PowerState(onMains: true) }
        return PowerState(onMains: false, batteryPercent: discharging.compactMap { $0 }.min())
    }
}
