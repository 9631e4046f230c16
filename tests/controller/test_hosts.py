"""Host names as logs write them -> the scheduler's nodes (pure)."""

from app.controller.hosts import expand_hostlist, map_hosts, normalise_hosts, short_name


def test_slurm_hostlists_expand_like_scontrol_show_hostnames():
    assert expand_hostlist("node[1-4]") == ["node1", "node2", "node3", "node4"]
    assert expand_hostlist("node[01-03,7]") == ["node01", "node02", "node03", "node7"]  # as scontrol
    assert expand_hostlist("node[8-10],gpu1") == ["node8", "node9", "node10", "gpu1"]
    assert expand_hostlist("r[1-2]-n[1-2]") == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert expand_hostlist("plain") == ["plain"] and expand_hostlist("odd[a-b]") == ["odd[a-b]"]


def test_fqdns_become_short_names_and_ips_stay():
    assert short_name("node3.cluster.example.") == "node3" and short_name("10.1.2.3") == "10.1.2.3"
    assert normalise_hosts(["node3.cluster.example", "node[2-3]", "10.1.2.3"]) == ("node3", "node2", "10.1.2.3")


def test_names_map_to_the_scheduler_nodes_or_are_unknown():
    m = map_hosts(["node3.cluster.example", "node[1-2]", "ghost"], ["node1", "node2", "node3"])
    assert m.nodes == {"node3.cluster.example": "node3", "node1": "node1", "node2": "node2"}
    assert m.unknown == ("ghost",)
    assert map_hosts(["node3"], ["node3.a.example"]).known == ["node3.a.example"]
    assert map_hosts(["node3"], ["node3.a.example", "node3.b.example"]).unknown == ("node3",)  # ambiguous


def test_a_huge_hostlist_is_kept_whole_and_maps_to_nothing():
    assert normalise_hosts(["n[1-999999999]"]) == ("n[1-999999999]",)
    assert map_hosts(["n[1-999999999]"], ["n1"]).unknown == ("n[1-999999999]",)
