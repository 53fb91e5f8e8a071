-- Argo CD health of a DynamoGraphDeploymentScalingAdapter. The adapter is the source of truth
-- for its component's replicas: the Dynamo operator copies spec.replicas into the DGD, and only
-- once that update succeeded writes status.replicas (= spec.replicas) and status.selector
-- (deploy/operator/internal/controller/dynamographdeploymentscalingadapter_controller.go). The
-- adapter has no conditions: a status behind its spec is a scale still being carried out.
-- Written for Lua 5.1 (Argo CD runs gopher-lua).
local hs = {}
local want = 1
if obj.spec ~= nil and obj.spec.replicas ~= nil then
  want = obj.spec.replicas
end
local status = obj.status
if status == nil or status.replicas == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Dynamo operator to scale to " .. tostring(want) .. " replicas"
  return hs
end
if status.replicas ~= want then
  hs.status = "Progressing"
  hs.message = "Scaling from " .. tostring(status.replicas) .. " to " .. tostring(want) .. " replicas"
  return hs
end
if status.selector == nil or status.selector == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the Dynamo operator to report the pods' selector"
  return hs
end
hs.status = "Healthy"
hs.message = tostring(want) .. " replicas"
return hs
