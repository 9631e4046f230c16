"""Kept slots: surviving shapes whose later lines are counted, not read (see keptshapes.py).

A compressor hands a shape over once its first line is folded into a template and found plain
(`learn`). From then on the C scan loop (or `count`, its pure-Python twin) counts the shape's
lines and records the rank/host variants they carry; `fold` moves those counts, last lines and
rank/host sets into the templates before the compressor reports.
"""

from __future__ import annotations

from app.core.compressed import MAX_SET_MEMBERS, Template, decode_line
from app.core.keptshapes import MAX_VARIANTS, DigitSensitivity, Fields, field_ranges, variant_key
from app.core.placement import RankHosts


class KeptSlots:
    """Kept slots of one compressor. `table` is its C ShapeTable (None: the pure-Python loop);
    `known_ranks`/`known_hosts` are the compressor's sets, filled with what counted lines carry."""

    def __init__(self, table, digit_sensitive: DigitSensitivity, line_cap: int, max_slots: int,
                 known_ranks: set[int], known_hosts: set[str]) -> None:
        self._table = table
        self._max_slots = max_slots
        self._digit_sensitive = digit_sensitive
        self._line_cap = line_cap
        self._known_ranks = known_ranks
        self._known_hosts = known_hosts
        self.slot_of: dict[bytes, int] = {}  # shape -> slot
        self._never: set[bytes] = set()  # shapes that always take the full path
        self._tpl: list[Template | None] = []  # per slot its template (None: over the template cap)
        self.fields: list[Fields] = []
        self._applied: list[int] = []  # counts already folded into the template
        self._counts: list[list[int]] = []  # pure-Python loop: [count, last line] per slot
        self._last_raw: dict[int, tuple[int, bytes]] = {}  # slot -> its last counted line
        self._hosts_seen: dict[bytes, str] = {}
        self._variants: set[tuple] = set()  # pure-Python loop: (slot, variant key)

    def undecided(self, shape: bytes) -> bool:
        return shape not in self.slot_of and shape not in self._never

    def count(self, slot: int, raw: bytes, line_no: int) -> bool:
        """Pure-Python twin of the C loop's kept slots: count the line; True when its rank/host
        variant is new for the slot (the caller records them)."""
        counts = self._counts[slot]
        counts[0] += 1
        counts[1] = line_no
        self._last_raw[slot] = (line_no, raw[: self._line_cap])
        key = (slot, variant_key(raw, self.fields[slot]))
        if key not in self._variants and len(self._variants) < MAX_VARIANTS:
            self._variants.add(key)
            return True
        return False

    def note_last_counted(self, slot: int, line_no: int, raw) -> None:
        """Remember the text of a slot's last counted line (a template shows its last line)."""
        last = self._last_raw.get(slot)
        if last is None or line_no > last[0]:
            self._last_raw[slot] = (line_no, bytes(raw[: self._line_cap]))

    def variant(self, slot: int, rank: int | None, host: str | None) -> None:
        """A counted line of a kept slot with a rank/host not seen for it: record them."""
        if rank is not None:
            self._known_ranks.add(rank)
        if host is not None:
            self._known_hosts.add(host)
        tpl = self._tpl[slot]
        if tpl is None:
            return
        if rank is not None and len(tpl.ranks) < MAX_SET_MEMBERS:
            tpl.ranks.add(rank)
        if host is not None and len(tpl.hosts) < MAX_SET_MEMBERS:
            tpl.hosts.add(host)

    def learn(self, shape: bytes, raw: bytes, text: str, kept) -> None:
        """Count later lines of this shape per shape when its lines change only counts. `kept` is
        what the compressor's keep path returned: (template, countable, rank match, host match)."""
        tpl, countable, rank_m, host_m = kept
        if countable is None:  # an error/chain line: this shape always takes the full path
            self._never.add(shape)
            return
        if not countable or len(self.slot_of) >= self._max_slots or len(raw) > self._line_cap:
            return
        if RankHosts.is_summary_line(text):  # torchrun's summary box: RankHosts reads these in sequence
            self._never.add(shape)
            return
        fields = field_ranges(raw, text, rank_m, host_m)
        # a line without digits is the only line of its shape: no other digits can make it an error
        if fields is None or (len(shape) != len(raw) and self._digit_sensitive(text)):
            self._never.add(shape)
            return
        slot = len(self._tpl)
        if self._table is not None:
            self._table.add_keep(raw, *fields)
        else:
            self._variants.add((slot, variant_key(raw, fields)))
        self.slot_of[shape] = slot
        self._tpl.append(tpl)
        self.fields.append(fields)
        self._applied.append(0)
        self._counts.append([0, 0])

    def fold(self) -> tuple[int, int]:
        """Move the counts not folded yet into the templates: (lines kept, lines over the
        template cap) that they add."""
        kept = overflow = 0
        counts = self._table.keep_counts() if self._table is not None else self._counts
        for slot, (count, _last) in enumerate(counts):
            delta = count - self._applied[slot]
            if not delta:
                continue
            self._applied[slot] = count
            tpl = self._tpl[slot]
            if tpl is None:
                overflow += delta
                continue
            kept += delta
            tpl.count += delta
        if self._table is not None:
            for slot, (last, raw) in enumerate(self._table.keep_last()):
                if last:
                    self.note_last_counted(slot, last, raw)
            self._merge_sets()
        for slot, (last, raw) in self._last_raw.items():
            tpl = self._tpl[slot]
            if tpl is not None and last > tpl.last_line:
                tpl.last_line = last
                tpl.last_text = decode_line(raw)
        return kept, overflow

    def _host_text(self, raw) -> str:
        key = bytes(raw)
        text = self._hosts_seen.get(key)
        if text is None:
            text = self._hosts_seen[key] = key.decode("utf-8", "replace")
        return text

    def _merge_sets(self) -> None:
        """The ranks and hosts the C loop read from kept lines, into their templates (capped like
        the rest) and the log's known ranks/hosts (not capped: a rank that is missing there would
        count as silent)."""
        names, per_slot = self._table.keep_sets()
        hosts = [self._host_text(name) for name in names]
        self._known_hosts.update(hosts)
        self._known_ranks.update(self._table.ranks_seen())
        for slot, (ranks, host_ids) in enumerate(per_slot):
            tpl = self._tpl[slot]
            if tpl is None:
                continue
            for members, new in ((tpl.ranks, ranks), (tpl.hosts, [hosts[h] for h in host_ids])):
                if len(members) + len(new) <= MAX_SET_MEMBERS:
                    members.update(new)
                    continue
                for value in new:
                    if len(members) >= MAX_SET_MEMBERS:
                        break
                    members.add(value)
