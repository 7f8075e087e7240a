"""The OpenAPI schema (/api/schema/) documents the management API from its serializers."""

from __future__ import annotations

import yaml


def test_the_schema_documents_the_management_api(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    paths = schema["paths"]
    assert set(paths["/api/deployments"]) >= {"get", "post"}
    assert set(paths["/api/deployments/{name}"]) >= {"get", "patch", "delete"}
    assert "post" in paths["/api/deployments/{name}/scale"] and "get" in paths["/api/nodes"]
    components = schema["components"]["schemas"]
    create = components["DeploymentCreate"]
    assert create["required"] == ["name"]
    assert create["properties"]["replicas"]["minimum"] == 0
    assert components["Scale"]["properties"]["replicas"]["minimum"] == 0
    assert {"kv_cache_gb", "node_selector", "device"} <= set(create["properties"])
    replicas = components["Deployment"]["properties"]["replica_states"]
    assert replicas["items"]["$ref"].endswith("/Replica")
