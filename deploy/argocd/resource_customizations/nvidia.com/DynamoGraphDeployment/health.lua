-- Argo CD health of a DynamoGraphDeployment, from the status the Dynamo operator writes at the
-- end of every reconcile (deploy/operator/internal/controller/dynamographdeployment_controller.go):
-- status.state (initializing|pending|successful|failed), one condition of type Ready (True only
-- when state is successful; its reason and message say what is not ready) and
-- status.observedGeneration, set to metadata.generation only when the reconcile succeeded.
-- Written for Lua 5.1 (Argo CD runs gopher-lua).
local hs = {}
local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Dynamo operator to report a status"
  return hs
end
local ready = nil
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    end
  end
end
local message = ""
if ready ~= nil and ready.message ~= nil then
  message = ready.message
end
if status.state == "failed" then
  hs.status = "Degraded"
  if message == "" then
    message = "The Dynamo operator reports the graph failed"
  end
  hs.message = message
  return hs
end
local generation = obj.metadata.generation
local observed = status.observedGeneration
local current = generation == nil or (observed ~= nil and observed == generation)
if status.state == "successful" and ready ~= nil and ready.status == "True" and current then
  hs.status = "Healthy"
  if message == "" then
    message = "All resources are ready"
  end
  hs.message = message
  return hs
end
hs.status = "Progressing"
if not current then
  hs.message = "Waiting for the Dynamo operator to reconcile generation " .. tostring(generation) ..
    " (it last reconciled " .. tostring(observed) .. ")"
elseif message ~= "" then
  hs.message = message
else
  hs.message = "The graph is " .. tostring(status.state or "starting")
end
return hs
