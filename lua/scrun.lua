--[[
scrun.lua for clusters where every compute node sees the container bundle at the same
path as the login node (a shared filesystem): nothing needs to be copied, so both hooks
only log and succeed.

Install it next to slurm.conf (or point SCRUN_PY_LUA at it).  See docs/hooks.md.
]]

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,
                              group_id, job_env)
  slurm.log_debug("stage_in: container %s, job %s, bundle %s, user %s:%s",
                  id, tostring(job_id), bundle, tostring(user_id), tostring(group_id))
  return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path,
                               spool_dir, config_file, job_id, user_id, group_id)
  slurm.log_debug("stage_out: container %s, job %s, bundle %s, rootfs %s",
                  id, tostring(job_id), bundle, root_path)
  return slurm.SUCCESS
end

slurm.log_debug("scrun.lua (shared filesystem) loaded")
return slurm.SUCCESS
